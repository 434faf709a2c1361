// bench: the printed block and the saved JSON follow vLLM's layout, labels and keys.
#include <gtest/gtest.h>

#include <limits>
#include <sstream>

#include "bench_client/report.h"

namespace qs::bench {
namespace {

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

BenchmarkMetrics sample_metrics() {
  RequestOutput a;
  a.success = true;
  a.ttft = 0.125;
  a.itl = {0.25, 0.125};
  a.latency = 0.5;
  a.output_tokens = 5;
  a.prompt_len = 10;
  a.generated_text = "hello";
  RequestOutput b;
  b.error = "HTTP 503: busy";
  b.prompt_len = 7;
  return calculate_metrics({a, b}, 2.0, nullptr, {50, 99.9}, {{"ttft", 500}});
}

ReportConfig sample_config() {
  ReportConfig c;
  c.model_id = "org/Model-7B";
  c.tokenizer_id = "/models/Model-7B";
  c.num_prompts = 2;
  c.request_rate = 10;
  c.max_concurrency = 4;
  c.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  c.percentiles = {50, 99.9};
  c.goodput_slo_ms = {{"ttft", 500}};
  return c;
}

TEST(BenchReport, PythonFormattingHelpers) {
  EXPECT_EQ(center(" Serving Benchmark Result ", 50, '='),
            "============ Serving Benchmark Result ============");
  EXPECT_EQ(center("Time to First Token", 50, '-'),
            "---------------Time to First Token----------------");
  EXPECT_EQ(python_float_str(1.0), "1.0");
  EXPECT_EQ(python_float_str(2.5), "2.5");
  EXPECT_EQ(python_float_str(0.1), "0.1");
  EXPECT_EQ(python_float_str(std::numeric_limits<double>::infinity()), "inf");
}

TEST(BenchReport, BlockHasVllmLabelsWidthsAndOrder) {
  const auto l = lines(format_result(sample_metrics(), 2.0, sample_config()));
  const std::vector<std::string> want_head = {
      "============ Serving Benchmark Result ============",
      "Successful requests:                     1         ",
      "Failed requests:                         1         ",
      "Maximum request concurrency:             4         ",
      "Request rate configured (RPS):           10.00     ",
      "Benchmark duration (s):                  2.00      ",
      "Total input tokens:                      10        ",
      "Total generated tokens:                  5         ",
      "Request throughput (req/s):              0.50      ",
      "Request goodput (req/s):                 0.50      ",
      "Output token throughput (tok/s):         2.50      ",
      "Peak output token throughput (tok/s):    3.00      ",
      "Peak concurrent requests:                1.00      ",
      "Total token throughput (tok/s):          7.50      ",
      "---------------Time to First Token----------------",
      "Mean TTFT (ms):                          125.00    ",
      "Median TTFT (ms):                        125.00    ",
      "P50 TTFT (ms):                           125.00    ",
      "P99.9 TTFT (ms):                         125.00    ",
      "-----Time per Output Token (excl. 1st token)------",
      "Mean TPOT (ms):                          93.75     ",
  };
  ASSERT_GT(l.size(), want_head.size());
  for (size_t i = 0; i < want_head.size(); ++i) EXPECT_EQ(l[i], want_head[i]) << "line " << i;
  EXPECT_EQ(l[l.size() - 6], "----------------End-to-end Latency----------------");
  EXPECT_EQ(l.back(), std::string(50, '='));
}

TEST(BenchReport, OptionalRowsAndSectionsFollowTheConfig) {
  ReportConfig c = sample_config();
  c.request_rate = std::numeric_limits<double>::infinity();
  c.max_concurrency.reset();
  c.goodput_slo_ms.clear();
  c.percentile_metrics = {"ttft", "itl"};
  const std::string s = format_result(sample_metrics(), 2.0, c);
  EXPECT_EQ(s.find("Request rate configured"), std::string::npos);
  EXPECT_EQ(s.find("Maximum request concurrency"), std::string::npos);
  EXPECT_EQ(s.find("goodput"), std::string::npos);
  EXPECT_EQ(s.find("TPOT"), std::string::npos);
  EXPECT_EQ(s.find("E2EL"), std::string::npos);
  EXPECT_NE(s.find("Mean ITL (ms):"), std::string::npos);
}

TEST(BenchReport, JsonHasVllmKeys) {
  ReportConfig c = sample_config();
  const BenchmarkMetrics m = sample_metrics();
  RequestOutput a;
  a.success = true;
  a.prompt_len = 10;
  a.ttft = 0.125;
  a.itl = {0.25, 0.125};
  a.generated_text = "hello";
  RequestOutput b;
  b.prompt_len = 7;
  b.error = "HTTP 503: busy";
  const auto j = result_json(m, 2.0, {a, b}, c, "20260101-120000");
  for (const char* k : {"date",
                        "backend",
                        "model_id",
                        "tokenizer_id",
                        "num_prompts",
                        "request_rate",
                        "burstiness",
                        "max_concurrency",
                        "duration",
                        "completed",
                        "total_input_tokens",
                        "total_output_tokens",
                        "request_throughput",
                        "request_goodput",
                        "output_throughput",
                        "total_token_throughput",
                        "input_lens",
                        "output_lens",
                        "ttfts",
                        "itls",
                        "generated_texts",
                        "errors",
                        "mean_ttft_ms",
                        "median_ttft_ms",
                        "std_ttft_ms",
                        "p50_ttft_ms",
                        "p99.9_ttft_ms",
                        "mean_tpot_ms",
                        "p99.9_tpot_ms",
                        "mean_itl_ms",
                        "std_itl_ms",
                        "mean_e2el_ms",
                        "p99.9_e2el_ms"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["date"], "20260101-120000");
  EXPECT_EQ(j["backend"], "openai");
  EXPECT_EQ(j["request_rate"], 10.0);
  EXPECT_EQ(j["max_concurrency"], 4);
  EXPECT_EQ(j["completed"], 1);
  EXPECT_EQ(j["input_lens"], nlohmann::ordered_json({10, 7}));
  EXPECT_EQ(j["output_lens"], nlohmann::ordered_json({5, 0}));
  EXPECT_EQ(j["errors"][1], "HTTP 503: busy");
  EXPECT_EQ(j["generated_texts"][0], "hello");
  EXPECT_DOUBLE_EQ(j["request_goodput"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["mean_ttft_ms"].get<double>(), 125.0);

  c.request_rate = std::numeric_limits<double>::infinity();
  c.max_concurrency.reset();
  c.goodput_slo_ms.clear();
  const auto k = result_json(m, 2.0, {a, b}, c, "d");
  EXPECT_EQ(k["request_rate"], "inf");
  EXPECT_TRUE(k["max_concurrency"].is_null());
  EXPECT_TRUE(k["request_goodput"].is_null());
}

TEST(BenchReport, ResultFilenameAsVllm) {
  ReportConfig c = sample_config();
  EXPECT_EQ(result_filename(c, "20260101-120000"),
            "openai-10.0qps-concurrency4-Model-7B-20260101-120000.json");
  c.request_rate = std::numeric_limits<double>::infinity();
  c.max_concurrency.reset();
  c.label = "ours";
  c.model_id = "models/stories260K/";
  EXPECT_EQ(result_filename(c, "d"), "ours-infqps-stories260K-d.json");
}

}  // namespace
}  // namespace qs::bench
