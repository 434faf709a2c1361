// bench_client: when each request of a serving benchmark is sent, as vLLM's get_request
// (vllm/benchmarks/serve.py): an infinite rate sends everything at t = 0; a finite rate draws
// inter-arrival gaps from Gamma(shape = burstiness, scale = 1 / (rate * burstiness)) (mean
// 1/rate; burstiness 1 is a Poisson process, < 1 burstier, > 1 more even, inf constant).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace qs::bench {

// The n raw inter-arrival gaps in seconds (rate finite and > 0, burstiness > 0 or inf).
Result<std::vector<double>> inter_arrival_gaps(int64_t n, double rate, double burstiness,
                                               uint64_t seed);

// Send times in seconds from the benchmark start. For a finite rate the cumulative gaps are
// rescaled so the last request goes out at exactly n / rate, as vLLM does to keep the
// achieved rate from drifting 1-2% with the seed.
Result<std::vector<double>> arrival_offsets(int64_t n, double rate, double burstiness,
                                            uint64_t seed);

}  // namespace qs::bench
