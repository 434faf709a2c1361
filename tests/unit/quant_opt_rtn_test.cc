// quant: OPT-RTN never does worse than RTN on the imatrix-weighted error it minimises (per
// group, all bit widths, per-channel and grouped, partial last groups), does clearly better on
// weights with outliers and skewed channel importance, and is plain RTN for asym schemes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "formats/rtn.h"
#include "quant/opt_rtn.h"

namespace qs::quant {
namespace {

// Per group, sum_j imatrix[j] (dequantized - w)^2.
std::vector<double> group_errors(const formats::QuantizedWeight& q, const float* w,
                                 const std::vector<float>& imat) {
  std::vector<float> deq(q.n * q.k);
  formats::dequantize(q, deq.data());
  std::vector<double> err(q.n * q.n_groups(), 0.0);
  for (int64_t r = 0; r < q.n; ++r) {
    for (int64_t c = 0; c < q.k; ++c) {
      const double d = static_cast<double>(deq[r * q.k + c]) - w[r * q.k + c];
      err[r * q.n_groups() + q.group_of(c)] += imat[c] * d * d;
    }
  }
  return err;
}

TEST(QuantOptRtn, NeverWorseThanRtnAndBetterOverall) {
  std::mt19937 rng(5);
  std::student_t_distribution<float> heavy(3.0f);  // outliers, as real weights have
  std::exponential_distribution<float> importance(1.0f);
  const int64_t n = 24, k = 200;
  std::vector<float> w(n * k), imat(k);
  for (float& v : w) v = 0.02f * heavy(rng);
  for (float& v : imat) v = importance(rng) * importance(rng);
  for (const int bits : {2, 3, 4, 8}) {
    for (const int64_t gs : {int64_t{-1}, int64_t{32}, int64_t{64}}) {
      const formats::QuantizedWeight rtn = formats::rtn_quantize(w.data(), n, k, bits, gs, true);
      const formats::QuantizedWeight opt = opt_rtn(w.data(), n, k, bits, gs, true, imat.data());
      ASSERT_TRUE(opt.validate().ok());
      const std::vector<double> e_rtn = group_errors(rtn, w.data(), imat);
      const std::vector<double> e_opt = group_errors(opt, w.data(), imat);
      double sum_rtn = 0, sum_opt = 0;
      for (size_t g = 0; g < e_rtn.size(); ++g) {
        EXPECT_LE(e_opt[g], e_rtn[g] * (1 + 1e-12)) << bits << " bits, gs " << gs << " group " << g;
        sum_rtn += e_rtn[g];
        sum_opt += e_opt[g];
      }
      if (bits <= 4) {
        EXPECT_LT(sum_opt, 0.95 * sum_rtn) << bits << " bits, gs " << gs;
      }
      for (float s : opt.scales) EXPECT_EQ(s, f16_to_f32(f32_to_f16(s)));
    }
  }
}

TEST(QuantOptRtn, AsymIsMinMaxRtn) {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t n = 8, k = 96;
  std::vector<float> w(n * k), imat(k, 1.0f);
  for (float& v : w) v = normal(rng);
  const formats::QuantizedWeight rtn = formats::rtn_quantize(w.data(), n, k, 4, 32, false);
  const formats::QuantizedWeight opt = opt_rtn(w.data(), n, k, 4, 32, false, imat.data());
  EXPECT_EQ(opt.codes, rtn.codes);
  EXPECT_EQ(opt.scales, rtn.scales);
  EXPECT_EQ(opt.zeros, rtn.zeros);
}

}  // namespace
}  // namespace qs::quant
