// bench_client: vLLM's printed result block and saved JSON for the serving benchmark, byte for byte
// in layout: labels left-aligned in 40 columns, values in 10 (so lines keep Python's trailing
// padding), section titles centred in 50 columns; JSON keys as `vllm bench serve
// --save-result` writes them, with the per-request lists always included.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_client/metrics.h"
#include "bench_client/request_output.h"

namespace qs::bench {

struct ReportConfig {
  std::string backend = "openai";  // "openai-chat" for /v1/chat/completions
  std::string label;               // result-file prefix; the backend when empty
  std::string model_id;
  std::string tokenizer_id;
  int64_t num_prompts = 0;
  double request_rate = 0;  // inf for "all at once"
  double burstiness = 1.0;
  std::optional<int64_t> max_concurrency;
  std::vector<std::string> percentile_metrics;  // of ttft, tpot, itl, e2el, in that order
  std::vector<double> percentiles;
  std::map<std::string, double> goodput_slo_ms;
};

// Python's "{s:{c}^{n}}": `s` centred in `width` with `fill` (extra fill goes right).
std::string center(const std::string& s, size_t width, char fill);
// Python's str(float): shortest round-trip digits, ".0" on integral values, "inf".
std::string python_float_str(double x);

std::string format_result(const BenchmarkMetrics& m, double duration_s, const ReportConfig& c);

// `date` is datetime.now().strftime("%Y%m%d-%H%M%S").
nlohmann::ordered_json result_json(const BenchmarkMetrics& m, double duration_s,
                                   const std::vector<RequestOutput>& outputs, const ReportConfig& c,
                                   const std::string& date);

// {label}-{rate}qps[-concurrency{C}]-{model basename}-{date}.json
std::string result_filename(const ReportConfig& c, const std::string& date);

}  // namespace qs::bench
