// quant: OPT-RTN never does worse than RTN on the imatrix-weighted error it minimises (per
// group, all bit widths, per-channel and grouped, partial last groups), does clearly better on
// weights with outliers and skewed channel importance, and is plain RTN for asym schemes; rows
// split over threads give the same codes and scales as one thread.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "formats/rtn.h"
#include "quant/block.h"
#include "quant/opt_rtn.h"

namespace qs::quant {
namespace {

constexpr int kDenseLinears = 7;  // q, k, v, o, gate, up, down

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

// block_imatrix is sum over real tokens of each linear's input squared / n_samples: checked
// for q_proj (whose input is the first RMSNorm's output, computed here directly) and for
// down_proj against the saved SwiGLU product.
TEST(QuantOptRtn, BlockImatrixSumsSquaredInputs) {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  BlockTensors<float> b;
  b.hidden = 16;
  b.linears = dense_linears(16, 24, 2, 1, 8);
  b.w.resize(kDenseLinears);
  b.bias.resize(kDenseLinears);
  b.n_heads = 2;
  b.n_kv_heads = 1;
  b.head_dim = 8;
  b.attn_norm.assign(b.hidden, 1.0f);
  b.mlp_norm.assign(b.hidden, 1.0f);
  for (int i = 0; i < kDenseLinears; ++i) {
    b.w[i].resize(b.out_features(i) * b.in_features(i));
    for (float& v : b.w[i]) v = 0.2f * normal(rng);
  }
  b.inv_freq = {1.0f, 0.1f, 0.01f, 0.001f};
  const int64_t n_samples = 10, seqlen = 3, tokens = n_samples * seqlen;  // two chunks
  std::vector<float> x(tokens * b.hidden);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> mask(tokens, 1);
  mask[4] = 0;
  const BlockCalibration calib{x.data(), nullptr, mask.data(), nullptr, n_samples, seqlen};
  ThreadPool pool(2);
  auto im = block_imatrix(b, calib, pool);
  ASSERT_TRUE(im.ok());
  std::vector<double> want_q(b.hidden, 0.0), want_down(b.out_features(kGateProj), 0.0);
  BlockActivations<float> act;
  std::vector<float> y(x.size());
  PerLinear<const float*> w(kDenseLinears);
  for (int i = 0; i < kDenseLinears; ++i) w[i] = b.w[i].data();
  block_forward<float>(b, w, x.data(), n_samples, seqlen, mask.data(), &act, y.data(), pool);
  for (int64_t t = 0; t < tokens; ++t) {
    if (!mask[t]) continue;
    double ss = 0;
    for (int64_t j = 0; j < b.hidden; ++j) ss += double(x[t * b.hidden + j]) * x[t * b.hidden + j];
    const double r = 1.0 / std::sqrt(ss / b.hidden + 1e-6);
    for (int64_t j = 0; j < b.hidden; ++j) want_q[j] += std::pow(x[t * b.hidden + j] * r, 2);
    for (int64_t j = 0; j < b.out_features(kGateProj); ++j)
      want_down[j] += std::pow(double(act.act[t * b.out_features(kGateProj) + j]), 2);
  }
  for (int64_t j = 0; j < b.hidden; ++j)
    EXPECT_NEAR((*im)[kQProj][j], want_q[j] / n_samples, 1e-4 * want_q[j]);
  EXPECT_EQ((*im)[kKProj], (*im)[kQProj]);
  for (int64_t j = 0; j < b.out_features(kGateProj); ++j)
    EXPECT_NEAR((*im)[kDownProj][j], want_down[j] / n_samples, 1e-5 * want_down[j] + 1e-12);
}

// add_squares adds each column's squares in token order, whatever the threads and however the
// mask cuts its eight-token runs: the same doubles as the plain loop.
TEST(QuantOptRtn, AddSquaresIsThePlainLoop) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t d = 200;  // past one 64-column chunk of a thread, not a multiple of it
  for (const int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{61}, int64_t{400}}) {
    std::vector<float> x(tokens * d);
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> mask(tokens);
    for (int64_t t = 0; t < tokens; ++t) mask[t] = (t % 11 == 3) ? 0 : 1;
    for (const bool masked : {false, true}) {
      std::vector<double> want(d, 0.5);
      for (int64_t t = 0; t < tokens; ++t) {
        if (masked && mask[t] == 0) continue;
        for (int64_t j = 0; j < d; ++j) want[j] += double(x[t * d + j]) * x[t * d + j];
      }
      for (const int threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<double> got(d, 0.5);
        add_squares(x.data(), tokens, d, masked ? mask.data() : nullptr, got.data(), &pool);
        EXPECT_EQ(got, want) << "tokens " << tokens << " masked " << masked << " threads "
                             << threads;
      }
    }
  }
}

TEST(QuantOptRtn, ThreadsGiveTheSameWeights) {
  std::mt19937 rng(8);
  std::student_t_distribution<float> heavy(3.0f);
  std::exponential_distribution<float> importance(1.0f);
  const int64_t n = 37, k = 160;
  std::vector<float> w(n * k), imat(k);
  for (float& v : w) v = 0.02f * heavy(rng);
  for (float& v : imat) v = importance(rng);
  ThreadPool pool(2);
  for (const int64_t gs : {int64_t{-1}, int64_t{32}}) {
    const formats::QuantizedWeight one = opt_rtn(w.data(), n, k, 4, gs, true, imat.data());
    const formats::QuantizedWeight two = opt_rtn(w.data(), n, k, 4, gs, true, imat.data(), &pool);
    EXPECT_EQ(one.codes, two.codes) << "group size " << gs;
    EXPECT_EQ(one.scales, two.scales) << "group size " << gs;
  }
}

}  // namespace
}  // namespace qs::quant
