// quant: the whole decoder block's gradients, from a loss on its output through the backward
// of every op and of the fake-quantized linears, into the block input and every linear's V,
// alpha and beta, against central finite differences of the double-precision forward (with the
// rounding decisions frozen, see FrozenRounding). Llama-style (GQA) and Qwen3-style (GQA,
// q/k-norm, head_dim * n_heads != hidden) blocks, padded sequences, a sliding window, and
// Mixture-of-Experts blocks (Qwen3-MoE's renormalised top-k, Qwen2-MoE's unnormalised top-k with
// its sigmoid-gated shared expert, Mixtral-style top-1 of many), where the gradient runs through
// each routing weight into the router logits with the top-k choice held fixed: the finite
// differences move no choice (the test checks the choices are the same at every probe). The
// float block (ops' kernels) is checked against the double one.
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
  // MoE (n_experts > 0): `intermediate` is each expert's width.
  int64_t n_experts = 0, top_k = 0, shared_intermediate = 0;
  bool norm_topk_prob = false;
};

std::vector<models::LayerLinear> case_linears(const BlockCase& c) {
  if (c.n_experts == 0) {
    return dense_linears(c.hidden, c.intermediate, c.n_heads, c.n_kv_heads, c.head_dim);
  }
  models::ModelConfig config;
  config.hidden_size = c.hidden;
  config.n_heads = c.n_heads;
  config.n_kv_heads = c.n_kv_heads;
  config.head_dim = c.head_dim;
  config.n_layers = 1;
  config.moe_layer = {true};
  config.moe.n_experts = c.n_experts;
  config.moe.expert_intermediate = c.intermediate;
  config.moe.shared_intermediate = c.shared_intermediate;
  return models::layer_linears(config, 0);
}

BlockTensors<double> random_block(const BlockCase& c, std::mt19937& rng) {
  BlockTensors<double> b;
  b.hidden = c.hidden;
  b.linears = case_linears(c);
  b.w.resize(b.linears.size());
  b.bias.resize(b.linears.size());
  if (c.n_experts > 0) {
    b.moe.n_experts = c.n_experts;
    b.moe.top_k = c.top_k;
    b.moe.expert_intermediate = c.intermediate;
    b.moe.shared_intermediate = c.shared_intermediate;
    b.moe.norm_topk_prob = c.norm_topk_prob;
    // Large router weights keep the k-th and (k+1)-th probabilities of each token apart.
    b.router = random_vec(rng, c.n_experts * c.hidden, -1.5, 1.5);
    for (double& v : b.router) v = static_cast<float>(v);
    if (c.shared_intermediate > 0) {
      b.shared_gate = random_vec(rng, c.hidden, -0.5, 0.5);
      for (double& v : b.shared_gate) v = static_cast<float>(v);
    }
  }
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
  for (int i = 0; i < b.n_linears(); ++i) {
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
  f.linears = d.linears;
  f.moe = d.moe;
  f.router = cast<float>(d.router);
  f.shared_gate = cast<float>(d.shared_gate);
  f.w.resize(d.w.size());
  f.bias.resize(d.bias.size());
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
  for (int i = 0; i < d.n_linears(); ++i) {
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
  const int n = b.n_linears();
  PerLinear<FakeQuantLinear<double>> fq(n);
  PerLinear<FrozenRounding<double>> frozen(n);
  PerLinear<std::vector<double>> wq(n);
  PerLinear<QdqCache<double>> cache(n);
  PerLinear<const double*> wptr(n);
  for (int i = 0; i < n; ++i) {
    fq[i] = make_fake_quant<double>(b.w[i].data(), b.out_features(i), b.in_features(i),
                                    i % 2 == 0 ? 4 : 3, 8, i % 3 != 1);
    fq[i].v = random_vec(rng, fq[i].v.size(), -0.3, 0.3);
    fq[i].alpha = random_vec(rng, fq[i].alpha.size(), 0.6, 0.95);
    fq[i].beta = random_vec(rng, fq[i].beta.size(), 0.6, 0.95);
    // A symmetric group's scale follows whichever of |wmin| beta and wmax alpha is larger: at a
    // tie it switches sides (and sign), a kink no difference quotient may straddle. Keep them
    // apart.
    for (size_t g = 0; g < fq[i].alpha.size() && fq[i].sym; ++g) {
      while (std::abs(-fq[i].wmin[g] * fq[i].beta[g] - fq[i].wmax[g] * fq[i].alpha[g]) < 1e-3)
        fq[i].alpha[g] = random_vec(rng, 1, 0.6, 0.95)[0];
    }
    wq[i].resize(fq[i].w.size());
    qdq_forward<double>(fq[i], wq[i].data(), &cache[i], &frozen[i]);
    frozen[i].replay = true;
    wptr[i] = wq[i].data();
  }

  BlockActivations<double> act;
  std::vector<double> y(m * c.hidden), dx(m * c.hidden);
  block_forward<double>(b, wptr, x.data(), n_seqs, seqlen, mask.data(), &act, y.data(), pool);
  const std::vector<int32_t> routes = act.routes;  // the choices every probe must keep
  std::vector<int> chosen(c.n_experts, 0);
  for (int32_t e : routes) chosen[e] = 1;
  int n_chosen = 0;
  for (int v : chosen) n_chosen += v;
  if (c.n_experts > 0) {
    ASSERT_GE(n_chosen, 2) << "the case should exercise several experts";
  }
  PerLinear<std::vector<double>> dw(n);
  PerLinear<double*> dwptr(n);
  for (int i = 0; i < n; ++i) {
    dw[i].assign(wq[i].size(), 0.0);
    dwptr[i] = dw[i].data();
  }
  block_backward<double>(b, wptr, act, mask.data(), r.data(), dx.data(), dwptr, pool);
  for (int i = 0; i < n; ++i) {  // an expert no token chose gets no gradient at all
    const int64_t e = b.linears[i].expert;
    if (e < 0 || chosen[e]) continue;
    for (double g : dw[i]) ASSERT_EQ(g, 0.0) << b.linears[i].name;
  }

  // The finite-difference forwards run inline (see quant_grad_ops_test).
  ThreadPool serial(1);
  BlockActivations<double> probe;
  auto loss = [&] {
    block_forward<double>(b, wptr, x.data(), n_seqs, seqlen, mask.data(), &probe, y.data(), serial);
    EXPECT_EQ(probe.routes, routes) << "a finite-difference probe changed the top-k choice";
    return dot(r, y);
  };
  expect_matches_fd("block dx", x, dx, loss);
  for (int i = 0; i < n; ++i) {
    const std::string& name = b.linears[i].name;
    std::vector<double> dv(fq[i].v.size()), da(fq[i].alpha.size()), db(fq[i].beta.size());
    qdq_backward<double>(fq[i], cache[i], dw[i].data(), dv.data(), da.data(), db.data());
    auto quant_loss = [&] {
      QdqCache<double> cc;
      qdq_forward<double>(fq[i], wq[i].data(), &cc, &frozen[i]);
      return loss();
    };
    expect_matches_fd(name + " dV", fq[i].v, dv, quant_loss);
    expect_matches_fd(name + " dalpha", fq[i].alpha, da, quant_loss);
    expect_matches_fd(name + " dbeta", fq[i].beta, db, quant_loss);
    QdqCache<double> cc;
    qdq_forward<double>(fq[i], wq[i].data(), &cc, &frozen[i]);  // back to the base point
  }

  // The float block on the same quantized weights: same output and gradients up to f32
  // rounding (relative to each tensor's largest entry).
  const BlockTensors<float> bf = to_float(b);
  PerLinear<std::vector<float>> wqf(n), dwf(n);
  PerLinear<const float*> wfptr(n);
  PerLinear<float*> dwfptr(n);
  for (int i = 0; i < n; ++i) {
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
  auto expect_close = [](const std::string& what, const auto& got,
                         const std::vector<double>& want) {
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < want.size(); ++j)
      ASSERT_NEAR(got[j], want[j], 1e-5 * scale) << what << "[" << j << "]";
  };
  expect_close("float y", yf, y);
  expect_close("float dx", dxf, dx);
  EXPECT_EQ(actf.routes, routes) << "the float block chose other experts";
  for (int i = 0; i < n; ++i) expect_close(b.linears[i].name, dwf[i], dw[i]);

  // The tuner's call: no dx (the q/k/v input gradients are skipped) and one scratch reused
  // across iterations (stale contents must not leak in): the same dW, exactly.
  BlockBackwardScratch<float> scratch;
  for (int round = 0; round < 2; ++round) {
    PerLinear<std::vector<float>> dwt(n);
    PerLinear<float*> dwtptr(n);
    for (int i = 0; i < n; ++i) {
      dwt[i].assign(wq[i].size(), 0.0f);
      dwtptr[i] = dwt[i].data();
    }
    block_backward<float>(bf, wfptr, actf, mask.data(), rf.data(), nullptr, dwtptr, pool, &scratch);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(dwt[i], dwf[i]) << b.linears[i].name << " round " << round;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, QuantBlockGrad,
    ::testing::Values(
        BlockCase{"llama_gqa", 16, 4, 2, 4, 24, 0, false, false},
        BlockCase{"qwen3_qknorm_gqa", 16, 4, 2, 6, 20, 0, true, false},
        BlockCase{"qwen2_bias_window", 16, 4, 1, 4, 24, 3, false, true},
        BlockCase{"qwen3_moe_norm_topk", 16, 4, 2, 6, 8, 0, true, false, 4, 2, 0, true},
        BlockCase{"qwen2_moe_shared", 16, 4, 2, 4, 8, 0, false, true, 4, 2, 12, false},
        BlockCase{"moe_top1_of_6", 16, 4, 2, 4, 8, 0, false, false, 6, 1, 0, true}),
    [](const ::testing::TestParamInfo<BlockCase>& p) { return p.param.name; });

}  // namespace
}  // namespace qs::quant
