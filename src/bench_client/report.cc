// bench_client: serving benchmark report (see report.h).
#include "bench_client/report.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace qs::bench {
namespace {

std::string row(const std::string& label, const std::string& value) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-40s %-10s\n", label.c_str(), value.c_str());
  return buf;
}
std::string row(const std::string& label, int64_t v) {
  return row(label, std::to_string(v));
}
std::string row2(const std::string& label, double v) {
  char num[64];
  std::snprintf(num, sizeof(num), "%.2f", v);
  return row(label, num);
}

// vLLM's percentile word: "99" for 99.0, "99.9" otherwise.
std::string p_word(double p) {
  if (std::floor(p) == p) return std::to_string(static_cast<int64_t>(p));
  return python_float_str(p);
}

struct MetricInfo {
  const char* key;
  const char* name;
  const char* header;
};
constexpr MetricInfo kMetrics[] = {
    {"ttft", "TTFT", "Time to First Token"},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
    {"itl", "ITL", "Inter-token Latency"},
    {"e2el", "E2EL", "End-to-end Latency"},
};

const MetricSummary& summary_of(const BenchmarkMetrics& m, const std::string& key) {
  return key == "ttft" ? m.ttft : key == "tpot" ? m.tpot : key == "itl" ? m.itl : m.e2el;
}

bool selected(const ReportConfig& c, const std::string& key) {
  for (const auto& k : c.percentile_metrics)
    if (k == key) return true;
  return false;
}

}  // namespace

std::string center(const std::string& s, size_t width, char fill) {
  if (s.size() >= width) return s;
  const size_t pad = width - s.size(), left = pad / 2;
  return std::string(left, fill) + s + std::string(pad - left, fill);
}

std::string python_float_str(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (std::isnan(x)) return "nan";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string format_result(const BenchmarkMetrics& m, double duration_s, const ReportConfig& c) {
  std::string out = center(" Serving Benchmark Result ", 50, '=') + "\n";
  out += row("Successful requests:", m.completed);
  out += row("Failed requests:", m.failed);
  if (c.max_concurrency) out += row("Maximum request concurrency:", *c.max_concurrency);
  if (!std::isinf(c.request_rate)) out += row2("Request rate configured (RPS):", c.request_rate);
  out += row2("Benchmark duration (s):", duration_s);
  out += row("Total input tokens:", m.total_input);
  out += row("Total generated tokens:", m.total_output);
  out += row2("Request throughput (req/s):", m.request_throughput);
  if (!c.goodput_slo_ms.empty()) out += row2("Request goodput (req/s):", m.request_goodput);
  out += row2("Output token throughput (tok/s):", m.output_throughput);
  out += row2("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  out += row2("Peak concurrent requests:", static_cast<double>(m.max_concurrent_requests));
  out += row2("Total token throughput (tok/s):", m.total_token_throughput);
  for (const MetricInfo& info : kMetrics) {
    if (!selected(c, info.key)) continue;
    const MetricSummary& s = summary_of(m, info.key);
    const std::string name = info.name;
    out += center(info.header, 50, '-') + "\n";
    out += row2("Mean " + name + " (ms):", s.mean_ms);
    out += row2("Median " + name + " (ms):", s.median_ms);
    for (const auto& [p, v] : s.percentiles_ms)
      out += row2("P" + p_word(p) + " " + name + " (ms):", v);
  }
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::ordered_json result_json(const BenchmarkMetrics& m, double duration_s,
                                   const std::vector<RequestOutput>& outputs, const ReportConfig& c,
                                   const std::string& date) {
  nlohmann::ordered_json j;
  j["date"] = date;
  j["endpoint_type"] = c.backend;
  j["backend"] = c.backend;
  j["label"] = c.label.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.label);
  j["model_id"] = c.model_id;
  j["tokenizer_id"] = c.tokenizer_id;
  j["num_prompts"] = c.num_prompts;
  if (std::isinf(c.request_rate)) {
    j["request_rate"] = "inf";
  } else {
    j["request_rate"] = c.request_rate;
  }
  if (std::isinf(c.burstiness)) {
    j["burstiness"] = "inf";
  } else {
    j["burstiness"] = c.burstiness;
  }
  j["max_concurrency"] = c.max_concurrency ? nlohmann::ordered_json(*c.max_concurrency)
                                           : nlohmann::ordered_json(nullptr);
  j["duration"] = duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = c.goodput_slo_ms.empty() ? nlohmann::ordered_json(nullptr)
                                                  : nlohmann::ordered_json(m.request_goodput);
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  nlohmann::ordered_json input_lens = nlohmann::ordered_json::array(), ttfts = input_lens,
                         itls = input_lens, latencies = input_lens, start_times = input_lens,
                         texts = input_lens, errors = input_lens;
  for (const RequestOutput& o : outputs) {
    input_lens.push_back(o.prompt_len);
    ttfts.push_back(o.ttft);
    itls.push_back(o.itl);
    latencies.push_back(o.latency);
    start_times.push_back(o.start_time);
    texts.push_back(o.generated_text);
    errors.push_back(o.error);
  }
  j["input_lens"] = input_lens;
  j["output_lens"] = m.actual_output_lens;
  j["ttfts"] = ttfts;
  j["itls"] = itls;
  j["latencies"] = latencies;
  j["start_times"] = start_times;
  j["generated_texts"] = texts;
  j["errors"] = errors;
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  for (const MetricInfo& info : kMetrics) {
    if (!selected(c, info.key)) continue;
    const MetricSummary& s = summary_of(m, info.key);
    const std::string k = info.key;
    j["mean_" + k + "_ms"] = s.mean_ms;
    j["median_" + k + "_ms"] = s.median_ms;
    j["std_" + k + "_ms"] = s.std_ms;
    for (const auto& [p, v] : s.percentiles_ms) j["p" + p_word(p) + "_" + k + "_ms"] = v;
  }
  return j;
}

std::string result_filename(const ReportConfig& c, const std::string& date) {
  const std::string label = c.label.empty() ? c.backend : c.label;
  // vLLM takes model_id.split("/")[-1]; a directory given with a trailing slash still names
  // its directory here.
  std::string model = c.model_id;
  while (!model.empty() && model.back() == '/') model.pop_back();
  const size_t slash = model.find_last_of('/');
  const std::string base = slash == std::string::npos ? model : model.substr(slash + 1);
  std::string name = label + "-" + python_float_str(c.request_rate) + "qps";
  if (c.max_concurrency) name += "-concurrency" + std::to_string(*c.max_concurrency);
  return name + "-" + base + "-" + date + ".json";
}

}  // namespace qs::bench
