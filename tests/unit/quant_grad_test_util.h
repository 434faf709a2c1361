// Shared by the quant gradient tests: random vectors and a central finite-difference
// comparison in double precision.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace qs::quant::testing {

inline std::vector<double> random_vec(std::mt19937& rng, size_t n, double lo = -1.0,
                                      double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks grad[i] against (L(theta + h e_i) - L(theta - h e_i)) / 2h for every `stride`-th i
// (offset by stride / 2, so long tensors are sampled across their whole length), where `loss`
// reads `theta` (perturbed in place and restored). In double with h = 1e-5 the difference
// quotient is exact to ~1e-9 for these smooth, O(1) functions; kAbs/kRel are far below the
// size of any real error (a flipped sign or a dropped term is off by O(1)).
inline void expect_matches_fd(const std::string& what, std::vector<double>& theta,
                              const std::vector<double>& grad, const std::function<double()>& loss,
                              size_t stride = 1, double h = 1e-5) {
  constexpr double kAbs = 1e-7, kRel = 1e-6;
  ASSERT_EQ(theta.size(), grad.size()) << what;
  int failures = 0;
  for (size_t i = stride / 2; i < theta.size(); i += stride) {
    const double saved = theta[i];
    theta[i] = saved + h;
    const double up = loss();
    theta[i] = saved - h;
    const double down = loss();
    theta[i] = saved;
    const double fd = (up - down) / (2 * h);
    if (std::abs(fd - grad[i]) > kAbs + kRel * std::abs(fd)) {
      if (++failures <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: analytic " << grad[i] << " vs finite diff " << fd;
      }
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << theta.size() << " mismatch";
}

}  // namespace qs::quant::testing
