// tests: the Prometheus text format (values, label escaping, counters' _total, cumulative
// histogram buckets) and vLLM's metric names, labels and bucket bounds.
#include <gtest/gtest.h>

#include "server/metrics.h"

namespace qs::server {
namespace {

bool contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST(ServerMetricsFormatTest, Values) {
  EXPECT_EQ(format_metric_value(1), "1.0");
  EXPECT_EQ(format_metric_value(0.25), "0.25");
  EXPECT_EQ(format_metric_value(1e-3), "0.001");
  EXPECT_EQ(format_metric_value(12345), "12345.0");
  EXPECT_EQ(format_metric_value(INFINITY), "+Inf");
  EXPECT_EQ(format_metric_value(-INFINITY), "-Inf");
  EXPECT_EQ(format_metric_value(NAN), "NaN");
}

TEST(ServerMetricsFormatTest, LabelsAreEscaped) {
  EXPECT_EQ(format_labels({}), "");
  EXPECT_EQ(format_labels({{"a", "x"}, {"b", "q\"\\\n"}}), "{a=\"x\",b=\"q\\\"\\\\\\n\"}");
}

TEST(ServerMetricsRegistryTest, RendersEachType) {
  MetricsRegistry r;
  r.define("t:requests", "Requests.", MetricType::kCounter);
  r.define("t:running", "Running.", MetricType::kGauge);
  r.define("t:latency_seconds", "Latency.", MetricType::kHistogram, {0.1, 1.0});
  r.add("t:requests", {{"code", "200"}}, 2);
  r.add("t:requests", {{"code", "200"}}, 1);
  r.set("t:running", {}, 4);
  r.set("t:running", {}, 3);
  for (double v : {0.05, 0.1, 0.5, 7.0}) r.observe("t:latency_seconds", {{"m", "x"}}, v);
  EXPECT_EQ(r.render(),
            "# HELP t:requests Requests.\n"
            "# TYPE t:requests counter\n"
            "t:requests_total{code=\"200\"} 3.0\n"
            "# HELP t:running Running.\n"
            "# TYPE t:running gauge\n"
            "t:running 3.0\n"
            "# HELP t:latency_seconds Latency.\n"
            "# TYPE t:latency_seconds histogram\n"
            "t:latency_seconds_bucket{m=\"x\",le=\"0.1\"} 2.0\n"
            "t:latency_seconds_bucket{m=\"x\",le=\"1.0\"} 3.0\n"
            "t:latency_seconds_bucket{m=\"x\",le=\"+Inf\"} 4.0\n"
            "t:latency_seconds_sum{m=\"x\"} 7.65\n"
            "t:latency_seconds_count{m=\"x\"} 4.0\n");
}

TEST(ServerMetricsTest, VllmNamesAndLabels) {
  ServerMetrics m("my-model", 512);
  m.add_prompt_tokens(5);
  m.add_generation_tokens(3);
  m.add_generation_tokens(4);
  m.observe_ttft(0.003);
  m.observe_inter_token_latency(0.02);
  m.request_finished("stop", 0.4, 5, 7);
  m.request_finished("length", 2.0, 5, 7);
  m.request_finished("length", 2.0, 5, 7);
  EngineStats s;
  s.num_running = 2;
  s.num_waiting = 1;
  s.kv_blocks_used = 1;
  s.kv_blocks_total = 2;
  s.prefix_cache_queries = 100;
  s.prefix_cache_hits = 40;
  m.set_engine_stats(s);
  const std::string text = m.render();
  const std::string l = "{model_name=\"my-model\"}";
  EXPECT_TRUE(contains(text, "vllm:num_requests_running" + l + " 2.0\n"));
  EXPECT_TRUE(contains(text, "vllm:num_requests_waiting" + l + " 1.0\n"));
  EXPECT_TRUE(contains(text, "vllm:kv_cache_usage_perc" + l + " 0.5\n"));
  EXPECT_TRUE(contains(text, "vllm:gpu_cache_usage_perc" + l + " 0.5\n"));
  EXPECT_TRUE(contains(text, "vllm:prefix_cache_queries_total" + l + " 100.0\n"));
  EXPECT_TRUE(contains(text, "vllm:prefix_cache_hits_total" + l + " 40.0\n"));
  EXPECT_TRUE(contains(text, "vllm:prompt_tokens_total" + l + " 5.0\n"));
  EXPECT_TRUE(contains(text, "vllm:generation_tokens_total" + l + " 7.0\n"));
  EXPECT_TRUE(contains(
      text,
      "vllm:request_success_total{model_name=\"my-model\",finished_reason=\"length\"} 2.0\n"));
  EXPECT_TRUE(contains(
      text, "vllm:request_success_total{model_name=\"my-model\",finished_reason=\"stop\"} 1.0\n"));
  EXPECT_TRUE(contains(
      text, "vllm:request_success_total{model_name=\"my-model\",finished_reason=\"abort\"} 0.0\n"));
  // vLLM's first TTFT buckets are 1 ms and 5 ms; 3 ms lands in the second.
  EXPECT_TRUE(contains(text,
                       "vllm:time_to_first_token_seconds_bucket{model_name=\"my-model\","
                       "le=\"0.001\"} 0.0\n"));
  EXPECT_TRUE(contains(text,
                       "vllm:time_to_first_token_seconds_bucket{model_name=\"my-model\","
                       "le=\"0.005\"} 1.0\n"));
  EXPECT_TRUE(contains(text,
                       "vllm:time_to_first_token_seconds_bucket{model_name=\"my-model\","
                       "le=\"2560.0\"} 1.0\n"));
  EXPECT_TRUE(contains(text, "vllm:inter_token_latency_seconds_count" + l + " 1.0\n"));
  EXPECT_TRUE(contains(text, "vllm:time_per_output_token_seconds_count" + l + " 1.0\n"));
  EXPECT_TRUE(contains(text,
                       "vllm:e2e_request_latency_seconds_bucket{model_name=\"my-model\","
                       "le=\"0.5\"} 1.0\n"));
  EXPECT_TRUE(contains(text, "vllm:e2e_request_latency_seconds_count" + l + " 3.0\n"));
  // Token-count histograms use 1-2-5 buckets up to max_model_len.
  EXPECT_TRUE(contains(text,
                       "vllm:request_prompt_tokens_bucket{model_name=\"my-model\","
                       "le=\"500.0\"} 3.0\n"));
  EXPECT_FALSE(contains(text, "le=\"1000.0\""));
  EXPECT_TRUE(contains(text, "# TYPE vllm:prompt_tokens counter\n"));
}

}  // namespace
}  // namespace qs::server
