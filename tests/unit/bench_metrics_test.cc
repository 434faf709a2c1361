// bench: per-request measurement from stream events (TTFT, ITL per chunk, latency, usage) and
// vLLM's aggregates (TPOT excludes the first token, ITL pooled, goodput, peaks), with numpy's
// percentile/mean/median/std as the reference (fixture written by
// scripts/gen_bench_percentile_goldens.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bench_client/metrics.h"

namespace qs::bench {
namespace {

std::string text_chunk(const std::string& text) {
  return nlohmann::json({{"choices", {{{"index", 0}, {"text", text}}}}}).dump();
}

TEST(BenchNumpyStats, PercentileMeanMedianStdMatchNumpy) {
  std::ifstream in(std::string(QS_SOURCE_DIR) +
                   "/tests/unit/fixtures/bench/numpy_percentiles.json");
  ASSERT_TRUE(in) << "missing numpy fixture";
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_GE(j["cases"].size(), 6u);
  for (const auto& c : j["cases"]) {
    const auto v = c["values"].get<std::vector<double>>();
    const std::string name = c["name"];
    auto near = [](double want) { return 1e-12 * std::max(1.0, std::abs(want)); };
    EXPECT_NEAR(mean(v), c["mean"].get<double>(), near(c["mean"])) << name;
    EXPECT_NEAR(percentile(v, 50), c["median"].get<double>(), near(c["median"])) << name;
    EXPECT_NEAR(stddev(v), c["std"].get<double>(), near(c["std"])) << name;
    for (const auto& pv : c["percentiles"]) {
      const double p = pv[0], want = pv[1];
      EXPECT_NEAR(percentile(v, p), want, near(want)) << name << " p" << p;
    }
  }
}

TEST(BenchNumpyStats, EmptyListCountsAsZero) {
  EXPECT_EQ(percentile({}, 99), 0.0);
  EXPECT_EQ(mean({}), 0.0);
  EXPECT_EQ(stddev({}), 0.0);
}

TEST(BenchStream, TimesTokenEventsNotUsageChunks) {
  StreamAccumulator acc(/*chat=*/false, /*start=*/1.0, /*prompt_len=*/9);
  acc.on_event(text_chunk("Hel"), 1.25);
  acc.on_event(text_chunk(""), 1.30);  // an empty-text chunk is still a token event
  acc.on_event(text_chunk("lo"), 1.45);
  acc.on_event(R"({"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":4}})", 1.60);
  acc.on_event("[DONE]", 1.70);
  EXPECT_TRUE(acc.done());
  const RequestOutput out = acc.finish();
  ASSERT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.generated_text, "Hello");
  EXPECT_DOUBLE_EQ(out.ttft, 0.25);
  ASSERT_EQ(out.itl.size(), 2u);
  EXPECT_NEAR(out.itl[0], 0.05, 1e-12);
  EXPECT_NEAR(out.itl[1], 0.15, 1e-12);
  EXPECT_NEAR(out.latency, 0.45, 1e-12);  // the usage chunk does not extend it
  EXPECT_EQ(out.output_tokens, 4);
  EXPECT_EQ(out.prompt_len, 11);  // the server's count replaces the client's
}

TEST(BenchStream, ChatDeltasAndUsageBesideChoices) {
  StreamAccumulator acc(/*chat=*/true, 0.0, 3);
  acc.on_event(R"({"choices":[{"delta":{"role":"assistant"}}]})", 0.1);
  acc.on_event(R"({"choices":[{"delta":{"content":"Hi"}}]})", 0.2);
  acc.on_event(
      R"({"choices":[{"delta":{"content":"!"},"finish_reason":"length"}],"usage":{"completion_tokens":2}})",
      0.3);
  const RequestOutput out = acc.finish();
  ASSERT_TRUE(out.success);
  EXPECT_EQ(out.generated_text, "Hi!");
  EXPECT_DOUBLE_EQ(out.ttft, 0.1);
  EXPECT_EQ(out.itl.size(), 2u);
  EXPECT_EQ(out.output_tokens, 2);
  EXPECT_EQ(out.prompt_len, 3);
}

TEST(BenchStream, FailuresCarryAnError) {
  StreamAccumulator none(false, 0.0, 1);
  none.on_event(R"({"choices":[],"usage":{"completion_tokens":0}})", 0.1);
  none.on_event("[DONE]", 0.2);
  RequestOutput a = none.finish();
  EXPECT_FALSE(a.success);
  EXPECT_NE(a.error.find("Never received"), std::string::npos);

  StreamAccumulator bad(false, 0.0, 1);
  bad.on_event(text_chunk("x"), 0.1);
  bad.on_event("{not json", 0.2);
  RequestOutput b = bad.finish();
  EXPECT_FALSE(b.success);
  EXPECT_NE(b.error.find("invalid JSON"), std::string::npos);

  StreamAccumulator err(false, 0.0, 1);
  err.on_event(R"({"error":{"message":"boom"}})", 0.1);
  EXPECT_FALSE(err.finish().success);
}

RequestOutput done(double start, double ttft, std::vector<double> itl, int64_t out_tokens,
                   int64_t prompt_len, std::string text = "") {
  RequestOutput o;
  o.success = true;
  o.start_time = start;
  o.ttft = ttft;
  o.itl = std::move(itl);
  o.latency = ttft;
  for (double g : o.itl) o.latency += g;
  o.output_tokens = out_tokens;
  o.prompt_len = prompt_len;
  o.generated_text = std::move(text);
  return o;
}

TEST(BenchMetrics, AggregatesAsVllm) {
  // Binary fractions throughout, so sums are exact and bucket edges unambiguous.
  std::vector<RequestOutput> outs;
  // 5 tokens in 3 chunks: TPOT = (0.5 - 0.125) / 4; events at 0.125, 0.375, 0.5.
  outs.push_back(done(0.0, 0.125, {0.25, 0.125}, 5, 10));
  // No usage: the text is counted (3 words); TPOT = 0.1875 / 2; events 0.75, 0.875, 0.9375.
  outs.push_back(done(0.5, 0.25, {0.125, 0.0625}, 0, 20, "x y z"));
  // One token: no TPOT and no ITL; event at 1.0625.
  outs.push_back(done(1.0, 0.0625, {}, 1, 30));
  RequestOutput failed;
  failed.error = "HTTP 500";
  failed.prompt_len = 40;
  outs.push_back(failed);
  auto words = [](const std::string& s) {
    return static_cast<int64_t>(std::count(s.begin(), s.end(), ' ') + 1);
  };
  const BenchmarkMetrics m = calculate_metrics(outs, 2.0, words, {50, 99}, {});
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 60);  // the failed request's prompt does not count
  EXPECT_EQ(m.total_output, 9);
  EXPECT_EQ(m.actual_output_lens, (std::vector<int64_t>{5, 3, 1, 0}));
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 4.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 34.5);
  EXPECT_DOUBLE_EQ(m.tpot.mean_ms, 93.75);
  EXPECT_DOUBLE_EQ(m.tpot.std_ms, 0.0);
  EXPECT_NEAR(m.ttft.mean_ms, 1000 * 0.4375 / 3, 1e-9);
  EXPECT_DOUBLE_EQ(m.ttft.median_ms, 125);
  // ITL pooled over requests, one gap per chunk: 0.25, 0.125, 0.125, 0.0625.
  EXPECT_DOUBLE_EQ(m.itl.mean_ms, 140.625);
  EXPECT_DOUBLE_EQ(m.itl.median_ms, 125);
  ASSERT_EQ(m.itl.percentiles_ms.size(), 2u);
  EXPECT_EQ(m.itl.percentiles_ms[1].first, 99);
  EXPECT_NEAR(m.itl.percentiles_ms[1].second, 246.25, 1e-9);  // numpy: 0.125 + 0.97 * 0.125
  EXPECT_NEAR(m.e2el.mean_ms, 1000.0 / 3, 1e-9);
  // [0, 0.5) and [0.5, 0.9375) touch but do not overlap.
  EXPECT_EQ(m.max_concurrent_requests, 1);
  // Six token events fall in the first second, one in the next.
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 6.0);
}

TEST(BenchMetrics, GoodputCountsRequestsMeetingEverySlo) {
  std::vector<RequestOutput> outs = {done(0, 0.1, {0.01, 0.01}, 3, 5),  // tpot 10 ms
                                     done(0, 0.3, {0.01}, 2, 5),        // ttft too slow
                                     done(0, 0.1, {0.1}, 2, 5),         // tpot 100 ms
                                     done(0, 0.1, {}, 1, 5)};           // tpot counts as 0
  const BenchmarkMetrics a = calculate_metrics(outs, 2.0, nullptr, {99}, {{"ttft", 200}});
  EXPECT_DOUBLE_EQ(a.request_goodput, 1.5);
  const BenchmarkMetrics b =
      calculate_metrics(outs, 2.0, nullptr, {99}, {{"ttft", 200}, {"tpot", 50}});
  EXPECT_DOUBLE_EQ(b.request_goodput, 1.0);
  const BenchmarkMetrics c = calculate_metrics(outs, 2.0, nullptr, {99}, {{"e2el", 150}});
  EXPECT_DOUBLE_EQ(c.request_goodput, 1.0);  // e2els 120, 310, 200, 100 ms
  const BenchmarkMetrics none = calculate_metrics(outs, 2.0, nullptr, {99}, {});
  EXPECT_EQ(none.request_goodput, 0.0);
}

}  // namespace
}  // namespace qs::bench
