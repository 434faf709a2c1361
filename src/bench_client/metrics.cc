// bench_client: serving benchmark aggregates (see metrics.h).
#include "bench_client/metrics.h"

#include <algorithm>
#include <cmath>

namespace qs::bench {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double q = p / 100.0;
  // numpy's virtual index for method="linear" (alpha = beta = 1): n*q + (1 - q) - 1.
  const double n = static_cast<double>(v.size());
  double h = n * q + (1.0 - q) - 1.0;
  h = std::clamp(h, 0.0, n - 1.0);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double t = h - static_cast<double>(lo);
  // numpy's _lerp: from the nearer end, so t = 1 gives b exactly.
  const double a = v[lo], b = v[hi], diff = b - a;
  return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

MetricSummary summarize_seconds(const std::vector<double>& seconds,
                                const std::vector<double>& percentiles) {
  MetricSummary s;
  s.mean_ms = mean(seconds) * 1000.0;
  s.median_ms = percentile(seconds, 50.0) * 1000.0;
  s.std_ms = stddev(seconds) * 1000.0;
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, percentile(seconds, p) * 1000.0);
  return s;
}

BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                   const CountTokens& count_output,
                                   const std::vector<double>& percentiles,
                                   const std::map<std::string, double>& goodput_slo_ms) {
  BenchmarkMetrics m;
  std::vector<double> ttfts, tpots, all_tpots, itls, e2els;
  for (const RequestOutput& o : outputs) {
    if (!o.success) {
      m.actual_output_lens.push_back(0);
      ++m.failed;
      continue;
    }
    // Without usage the text is re-tokenized: ITL cannot count tokens, since one chunk may
    // carry several.
    int64_t output_len = o.output_tokens;
    if (output_len == 0) output_len = count_output ? count_output(o.generated_text) : 1;
    m.actual_output_lens.push_back(output_len);
    m.total_input += o.prompt_len;
    double tpot = 0.0;
    if (output_len > 1) {  // TPOT excludes the first token
      tpot = (o.latency - o.ttft) / static_cast<double>(output_len - 1);
      tpots.push_back(tpot);
    }
    all_tpots.push_back(tpot);
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
    ++m.completed;
  }
  for (int64_t n : m.actual_output_lens) m.total_output += n;

  if (!goodput_slo_ms.empty()) {
    int64_t good = 0;
    for (size_t i = 0; i < ttfts.size(); ++i) {
      bool ok = true;
      for (const auto& [name, slo_ms] : goodput_slo_ms) {
        const double v = name == "ttft" ? ttfts[i] : name == "tpot" ? all_tpots[i] : e2els[i];
        ok = ok && v <= slo_ms / 1000.0;
      }
      good += ok;
    }
    m.request_goodput = static_cast<double>(good) / duration_s;
  }

  // Peak output throughput: token events placed at start + ttft + cumulative ITL, counted
  // in 1-s buckets from the earliest start; peak concurrency by a sweep line where an end
  // sorts before a start at the same instant (half-open intervals).
  double min_start = 0, max_end = 0;
  bool any = false;
  for (const RequestOutput& o : outputs) {
    if (!o.success) continue;
    min_start = any ? std::min(min_start, o.start_time) : o.start_time;
    max_end = any ? std::max(max_end, o.start_time + o.latency) : o.start_time + o.latency;
    any = true;
  }
  if (any) {
    const size_t n_buckets = static_cast<size_t>(std::ceil(max_end - min_start)) + 1;
    std::vector<double> tokens_per_s(n_buckets, 0.0);
    std::vector<std::pair<double, int>> events;
    for (const RequestOutput& o : outputs) {
      if (!o.success) continue;
      double t = o.start_time + o.ttft;
      auto add = [&](double at) {
        const double b = std::floor(at - min_start);
        if (b >= 0 && b < static_cast<double>(n_buckets)) tokens_per_s[static_cast<size_t>(b)] += 1;
      };
      add(t);
      for (double gap : o.itl) add(t += gap);
      events.emplace_back(o.start_time, 1);
      events.emplace_back(o.start_time + o.latency, -1);
    }
    std::sort(events.begin(), events.end());
    int64_t current = 0;
    for (const auto& e : events) {
      current += e.second;
      m.max_concurrent_requests = std::max(m.max_concurrent_requests, current);
    }
    m.max_output_tokens_per_s = *std::max_element(tokens_per_s.begin(), tokens_per_s.end());
  }

  m.request_throughput = static_cast<double>(m.completed) / duration_s;
  m.output_throughput = static_cast<double>(m.total_output) / duration_s;
  m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  m.ttft = summarize_seconds(ttfts, percentiles);
  m.tpot = summarize_seconds(tpots, percentiles);
  m.itl = summarize_seconds(itls, percentiles);
  m.e2el = summarize_seconds(e2els, percentiles);
  return m;
}

}  // namespace qs::bench
