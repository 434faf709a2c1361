// OPT-RTN's error sums (ops/scale_search.h): the AVX-512 kernel gives the scalar reference's
// doubles bit for bit (so the search picks the same scales on every CPU), for group lengths
// below, at and past the sixteen-candidate lanes, candidate counts with a partial last pass,
// bit widths 2 to 8, with and without an imatrix, and scales small enough to clamp every code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../common/isa_skip.h"
#include "ops/scale_search.h"

namespace qs {
namespace {

using kernels::Isa;

TEST(ScaleSearch, Avx512MatchesTheScalarSumsBitForBit) {
  const std::vector<Isa> isas = testing_util::runnable_isas({Isa::kAvx512});
  if (isas.empty()) GTEST_SKIP() << "no SIMD variant of the scale search runs on this CPU";
  std::mt19937 rng(17);
  std::student_t_distribution<float> heavy(3.0f);
  std::exponential_distribution<float> importance(1.0f);
  for (const int64_t count : {int64_t{1}, int64_t{7}, int64_t{32}, int64_t{128}, int64_t{577}}) {
    std::vector<float> w(count), imat(count);
    for (float& v : w) v = 0.02f * heavy(rng);
    for (float& v : imat) v = importance(rng) * importance(rng);
    for (const int bits : {2, 3, 4, 8}) {
      const int half = 1 << (bits - 1);
      for (const int64_t n_scales : {int64_t{1}, int64_t{16}, int64_t{17}, int64_t{202}}) {
        std::vector<float> scales(n_scales);
        for (int64_t c = 0; c < n_scales; ++c) {
          // From far below the weights' range (every code clamps) to past it, both signs.
          const float mag = 1e-5f * std::pow(1.2f, static_cast<float>(c % 60));
          scales[c] = c % 3 == 0 ? -mag : mag;
        }
        for (const bool weighted : {true, false}) {
          const float* im = weighted ? imat.data() : nullptr;
          std::vector<double> want(n_scales), got(n_scales, -1.0);
          ops::scale_search_errors_with_isa(Isa::kRef, w.data(), im, count, scales.data(), n_scales,
                                            half, want.data());
          ops::scale_search_errors_with_isa(isas[0], w.data(), im, count, scales.data(), n_scales,
                                            half, got.data());
          for (int64_t c = 0; c < n_scales; ++c) {
            ASSERT_EQ(std::memcmp(&got[c], &want[c], sizeof(double)), 0)
                << "count " << count << " bits " << bits << " scales " << n_scales << " weighted "
                << weighted << " candidate " << c << ": " << got[c] << " vs " << want[c];
          }
        }
      }
    }
  }
}

// The candidate scales: the AVX-512 kernel's are the scalar ones bit for bit, for the grids of
// every bit width (2 bits: step 0.01 over +-90; else 0.06 over +-100), group maxima of either
// sign from far below the f16 floor (every candidate floored) through f16's subnormals to past
// its range (candidates that overflow to inf), and for 3 bits, where half - step i crosses 0.
TEST(ScaleSearch, Avx512CandidatesMatchTheScalarOnes) {
  const std::vector<Isa> isas = testing_util::runnable_isas({Isa::kAvx512});
  if (isas.empty()) GTEST_SKIP() << "no SIMD variant of the scale search runs on this CPU";
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exponent(-30.0f, 20.0f);
  for (const int bits : {2, 3, 4, 5, 6, 7}) {
    const int half = 1 << (bits - 1);
    const double step = bits == 2 ? 0.01 : 0.06;
    const int imax = bits == 2 ? 90 : 100;
    for (int trial = 0; trial < 2000; ++trial) {
      const float gmax = (trial % 2 ? -1.0f : 1.0f) * std::exp2(exponent(rng));
      std::vector<float> want(2 * imax + 1), got(2 * imax + 1, -1.0f);
      ops::scale_candidates_with_isa(Isa::kRef, gmax, half, step, imax, want.data());
      ops::scale_candidates_with_isa(isas[0], gmax, half, step, imax, got.data());
      for (int c = 0; c <= 2 * imax; ++c) {
        ASSERT_EQ(std::memcmp(&got[c], &want[c], sizeof(float)), 0)
            << "bits " << bits << " gmax " << gmax << " candidate " << c << ": " << got[c] << " vs "
            << want[c];
      }
    }
  }
}

}  // namespace
}  // namespace qs
