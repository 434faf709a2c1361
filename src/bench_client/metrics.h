// bench_client: the aggregates of vLLM's serving benchmark (calculate_metrics in
// vllm/benchmarks/serve.py): throughputs over successful requests, and per metric (TTFT, TPOT,
// ITL, E2EL) the mean, median, population std and percentiles, computed as numpy computes
// them (np.percentile's default linear interpolation; an empty list counts as [0]).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench_client/dataset.h"
#include "bench_client/request_output.h"

namespace qs::bench {

// np.percentile(values, p) with method="linear"; p in [0, 100]; 0 for an empty list.
double percentile(std::vector<double> values, double p);
double mean(const std::vector<double>& values);
// np.std (ddof = 0).
double stddev(const std::vector<double>& values);

struct MetricSummary {  // milliseconds
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value)
};

MetricSummary summarize_seconds(const std::vector<double>& seconds,
                                const std::vector<double>& percentiles);

struct BenchmarkMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double request_throughput = 0;
  double request_goodput = 0;
  double output_throughput = 0;
  double total_token_throughput = 0;
  double max_output_tokens_per_s = 0;   // most token events in one 1-s bucket
  int64_t max_concurrent_requests = 0;  // sweep line over [start, start + latency)
  MetricSummary ttft, tpot, itl, e2el;
  std::vector<int64_t> actual_output_lens;  // per request, 0 for a failed one
};

// `goodput_slo_ms`: keys "ttft", "tpot", "e2el"; a request is good when it meets all given
// (a request with at most one output token has TPOT 0 here, as in vLLM). Output tokens come
// from the server's usage when it sent any, else from `count_output` on the generated text.
BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                   const CountTokens& count_output,
                                   const std::vector<double>& percentiles,
                                   const std::map<std::string, double>& goodput_slo_ms);

}  // namespace qs::bench
