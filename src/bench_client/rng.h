// bench_client: the one random source of the benchmark client. std::mt19937_64's output sequence is
// fixed by the standard, but std::uniform_int_distribution and friends are not, so the
// bounded integers and uniform reals are drawn here: a seed names the same requests and the
// same arrival times on every standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace qs::bench {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, n), n > 0; rejection sampling, so no modulo bias.
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = engine_();
    while (x >= limit);
    return x % n;
  }
  // Uniform integer in [lo, hi], lo <= hi.
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }
  // Uniform in (0, 1): 53 random bits, never 0 so that log() stays finite.
  double open01() { return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal by Box-Muller.
  double normal() {
    return std::sqrt(-2.0 * std::log(open01())) * std::cos(6.283185307179586 * open01());
  }
  // Gamma(shape, 1) by Marsaglia and Tsang (2000); shape < 1 via the boost
  // Gamma(k) = Gamma(k + 1) * U^(1/k).
  double gamma(double shape) {
    if (shape < 1.0) return gamma(shape + 1.0) * std::pow(open01(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x, v;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = open01();
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
    }
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace qs::bench
