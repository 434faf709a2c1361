// quant: the whole decoder block's gradients, from a loss on its output through the backward
// of every op and of the fake-quantized linears, into the block input and every linear's V,
// alpha and beta, against central finite differences of the double-precision forward (with the
// rounding decisions frozen, see FrozenRounding). Llama-style (GQA) and Qwen3-style (GQA,
// q/k-norm, head_dim * n_heads != hidden) blocks, padded sequences, a sliding window. The float
// block (ops' kernels) is checked against the double one.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "quant/block.h"
#include "quant/fake_quant.h"
#include "quant_grad_test_util.h"

namespace qs::quant {
namespace {

using testing::dot;
using testing::expect_matches_fd;
using testing::random_vec;

struct BlockCase {
  const char* name;
  int64_t hidden, n_heads, n_kv_heads, head_dim, intermediate, window;
  bool qk_norm, qkv_bias;
};

BlockTensors<double> random_block(const BlockCase& c, std::mt19937& rng) {
  BlockTensors<double> b;
  b.hidden = c.hidden;
  b.intermediate = c.intermediate;
  b.n_heads = c.n_heads;
  b.n_kv_heads = c.n_kv_heads;
  b.head_dim = c.head_dim;
  b.rms_norm_eps = 1e-6;
  b.sliding_window = c.window;
  b.attn_norm = random_vec(rng, c.hidden, 0.5, 1.5);
  b.mlp_norm = random_vec(rng, c.hidden, 0.5, 1.5);
  if (c.qk_norm) {
    b.q_norm = random_vec(rng, c.head_dim, 0.5, 1.5);
    b.k_norm = random_vec(rng, c.head_dim, 0.5, 1.5);
  }
  for (int i = 0; i < kNumLinears; ++i) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(b.in_features(i)));
    b.w[i] = random_vec(rng, b.out_features(i) * b.in_features(i), -2 * bound, 2 * bound);
    // Weights as f32 values, so that the float block sees exactly the same ones.
    for (double& v : b.w[i]) v = static_cast<float>(v);
  }
  if (c.qkv_bias) {
    for (int i : {kQProj, kKProj, kVProj})
      b.bias[i] = random_vec(rng, b.out_features(i), -0.2, 0.2);
  }
  b.inv_freq.resize(c.head_dim / 2);
  for (int64_t j = 0; j < c.head_dim / 2; ++j)
    b.inv_freq[j] = static_cast<float>(std::pow(10000.0, -2.0 * j / c.head_dim));
  return b;
}

template <class To, class From>
std::vector<To> cast(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

BlockTensors<float> to_float(const BlockTensors<double>& d) {
  BlockTensors<float> f;
  f.hidden = d.hidden;
  f.intermediate = d.intermediate;
  f.n_heads = d.n_heads;
  f.n_kv_heads = d.n_kv_heads;
  f.head_dim = d.head_dim;
  f.rms_norm_eps = d.rms_norm_eps;
  f.sliding_window = d.sliding_window;
  f.attn_norm = cast<float>(d.attn_norm);
  f.mlp_norm = cast<float>(d.mlp_norm);
  f.q_norm = cast<float>(d.q_norm);
  f.k_norm = cast<float>(d.k_norm);
  f.inv_freq = cast<float>(d.inv_freq);
  for (int i = 0; i < kNumLinears; ++i) {
    f.w[i] = cast<float>(d.w[i]);
    f.bias[i] = cast<float>(d.bias[i]);
  }
  return f;
}

class QuantBlockGrad : public ::testing::TestWithParam<BlockCase> {};

TEST_P(QuantBlockGrad, InputAndQuantParamsMatchFiniteDifferences) {
  const BlockCase c = GetParam();
  std::mt19937 rng(11);
  ThreadPool pool(2);
  const BlockTensors<double> b = random_block(c, rng);
  const int64_t n_seqs = 2, seqlen = 5, m = n_seqs * seqlen;
  std::vector<uint8_t> mask(m, 1);
  mask[seqlen] = 0;  // sequence 1 is left-padded by one position
  std::vector<double> x = random_vec(rng, m * c.hidden, -2, 2);
  const std::vector<double> r = random_vec(rng, m * c.hidden);

  // Mixed schemes: sym and asym, 4 and 3 bits, groups of 8 (partial where in % 8 != 0).
  PerLinear<FakeQuantLinear<double>> fq;
  PerLinear<FrozenRounding<double>> frozen;
  PerLinear<std::vector<double>> wq;
  PerLinear<QdqCache<double>> cache;
  PerLinear<const double*> wptr;
  for (int i = 0; i < kNumLinears; ++i) {
    fq[i] = make_fake_quant<double>(b.w[i].data(), b.out_features(i), b.in_features(i),
                                    i % 2 == 0 ? 4 : 3, 8, i % 3 != 1);
    fq[i].v = random_vec(rng, fq[i].v.size(), -0.3, 0.3);
    fq[i].alpha = random_vec(rng, fq[i].alpha.size(), 0.6, 0.95);
    fq[i].beta = random_vec(rng, fq[i].beta.size(), 0.6, 0.95);
    wq[i].resize(fq[i].w.size());
    qdq_forward<double>(fq[i], wq[i].data(), &cache[i], &frozen[i]);
    frozen[i].replay = true;
    wptr[i] = wq[i].data();
  }

  BlockActivations<double> act;
  std::vector<double> y(m * c.hidden), dx(m * c.hidden);
  block_forward<double>(b, wptr, x.data(), n_seqs, seqlen, mask.data(), &act, y.data(), pool);
  PerLinear<std::vector<double>> dw;
  PerLinear<double*> dwptr;
  for (int i = 0; i < kNumLinears; ++i) {
    dw[i].assign(wq[i].size(), 0.0);
    dwptr[i] = dw[i].data();
  }
  block_backward<double>(b, wptr, act, mask.data(), r.data(), dx.data(), dwptr, pool);

  // The finite-difference forwards run inline (see quant_grad_ops_test).
  ThreadPool serial(1);
  auto loss = [&] {
    block_forward<double>(b, wptr, x.data(), n_seqs, seqlen, mask.data(), nullptr, y.data(),
                          serial);
    return dot(r, y);
  };
  expect_matches_fd("block dx", x, dx, loss);
  for (int i = 0; i < kNumLinears; ++i) {
    std::vector<double> dv(fq[i].v.size()), da(fq[i].alpha.size()), db(fq[i].beta.size());
    qdq_backward<double>(fq[i], cache[i], dw[i].data(), dv.data(), da.data(), db.data());
    auto quant_loss = [&] {
      QdqCache<double> cc;
      qdq_forward<double>(fq[i], wq[i].data(), &cc, &frozen[i]);
      return loss();
    };
    expect_matches_fd(std::string(linear_name(i)) + " dV", fq[i].v, dv, quant_loss);
    expect_matches_fd(std::string(linear_name(i)) + " dalpha", fq[i].alpha, da, quant_loss);
    expect_matches_fd(std::string(linear_name(i)) + " dbeta", fq[i].beta, db, quant_loss);
    QdqCache<double> cc;
    qdq_forward<double>(fq[i], wq[i].data(), &cc, &frozen[i]);  // back to the base point
  }

  // The float block on the same quantized weights: same output and gradients up to f32
  // rounding (relative to each tensor's largest entry).
  const BlockTensors<float> bf = to_float(b);
  PerLinear<std::vector<float>> wqf, dwf;
  PerLinear<const float*> wfptr;
  PerLinear<float*> dwfptr;
  for (int i = 0; i < kNumLinears; ++i) {
    wqf[i] = cast<float>(wq[i]);
    wfptr[i] = wqf[i].data();
    dwf[i].assign(wq[i].size(), 0.0f);
    dwfptr[i] = dwf[i].data();
  }
  const std::vector<float> xf = cast<float>(x), rf = cast<float>(r);
  std::vector<float> yf(y.size()), dxf(dx.size());
  BlockActivations<float> actf;
  block_forward<float>(bf, wfptr, xf.data(), n_seqs, seqlen, mask.data(), &actf, yf.data(), pool);
  block_backward<float>(bf, wfptr, actf, mask.data(), rf.data(), dxf.data(), dwfptr, pool);
  block_forward<double>(b, wptr, x.data(), n_seqs, seqlen, mask.data(), nullptr, y.data(), pool);
  auto expect_close = [](const char* what, const auto& got, const std::vector<double>& want) {
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < want.size(); ++j)
      ASSERT_NEAR(got[j], want[j], 1e-5 * scale) << what << "[" << j << "]";
  };
  expect_close("float y", yf, y);
  expect_close("float dx", dxf, dx);
  for (int i = 0; i < kNumLinears; ++i) expect_close(linear_name(i), dwf[i], dw[i]);

  // The tuner's call: no dx (the q/k/v input gradients are skipped) and one scratch reused
  // across iterations (stale contents must not leak in): the same dW, exactly.
  BlockBackwardScratch<float> scratch;
  for (int round = 0; round < 2; ++round) {
    PerLinear<std::vector<float>> dwt;
    PerLinear<float*> dwtptr;
    for (int i = 0; i < kNumLinears; ++i) {
      dwt[i].assign(wq[i].size(), 0.0f);
      dwtptr[i] = dwt[i].data();
    }
    block_backward<float>(bf, wfptr, actf, mask.data(), rf.data(), nullptr, dwtptr, pool, &scratch);
    for (int i = 0; i < kNumLinears; ++i) {
      ASSERT_EQ(dwt[i], dwf[i]) << linear_name(i) << " round " << round;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, QuantBlockGrad,
    ::testing::Values(BlockCase{"llama_gqa", 16, 4, 2, 4, 24, 0, false, false},
                      BlockCase{"qwen3_qknorm_gqa", 16, 4, 2, 6, 20, 0, true, false},
                      BlockCase{"qwen2_bias_window", 16, 4, 1, 4, 24, 3, false, true}),
    [](const ::testing::TestParamInfo<BlockCase>& p) { return p.param.name; });

}  // namespace
}  // namespace qs::quant
