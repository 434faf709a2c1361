// bench_client: request arrival times (see arrivals.h).
#include "bench_client/arrivals.h"

#include <cmath>

#include "bench_client/rng.h"

namespace qs::bench {

Result<std::vector<double>> inter_arrival_gaps(int64_t n, double rate, double burstiness,
                                               uint64_t seed) {
  if (!(rate > 0.0) || std::isinf(rate)) {
    return invalid_argument("a finite request rate > 0 is needed to draw arrival gaps");
  }
  if (!(burstiness > 0.0)) return invalid_argument("--burstiness must be positive");
  std::vector<double> gaps(std::max<int64_t>(n, 0));
  Rng rng(seed);
  for (double& g : gaps) {
    // Infinite burstiness is the limit of a gamma with vanishing variance: a constant gap.
    g = std::isinf(burstiness) ? 1.0 / rate : rng.gamma(burstiness) / (rate * burstiness);
  }
  return gaps;
}

Result<std::vector<double>> arrival_offsets(int64_t n, double rate, double burstiness,
                                            uint64_t seed) {
  if (!(burstiness > 0.0)) return invalid_argument("--burstiness must be positive");
  if (!(rate > 0.0)) return invalid_argument("--request-rate must be positive (or inf)");
  std::vector<double> offsets(std::max<int64_t>(n, 0), 0.0);
  if (std::isinf(rate) || n == 0) return offsets;
  QS_ASSIGN_OR_RETURN(std::vector<double> gaps, inter_arrival_gaps(n, rate, burstiness, seed));
  double t = 0;
  for (int64_t i = 0; i < n; ++i) offsets[i] = (t += gaps[i]);
  const double scale = (static_cast<double>(n) / rate) / offsets.back();
  for (double& x : offsets) x *= scale;
  return offsets;
}

}  // namespace qs::bench
