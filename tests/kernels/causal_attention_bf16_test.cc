// Tests of the fused causal attention with bf16 products (ops::causal_attention_bf16,
// kernels/cpu/attention_bf16_avx512.cc): against a double-precision reference computed from the
// same bf16-rounded Q, K (scaled first, in f32) and V, and against quant::attention_forward's
// per-block GEMM path, over sequence lengths on both sides of the 64-query tiles and 64-key
// blocks, head dims 64, 128 and 80 (not a multiple of the 32-column panels), GQA groups 1 and
// 3, two sequences; then that quant::attention_forward dispatches to it exactly where it should
// and that the AutoRound backward fed its out and lse agrees with the backward fed the old path's.
// Skips, saying so, where the CPU lacks AVX512-BF16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "ops/causal_attention.h"
#include "ops/gemm.h"
#include "quant/grad_ops.h"

namespace qs {
namespace {

constexpr int64_t kSeqs = 2, kKvHeads = 2;
// The unit roundoff of bf16 (8 significant bits, 2^-8): P's rounding moves each probability by
// at most this fraction, so an output by at most this fraction of sum_j p_j |v_j| / sum_j p_j.
constexpr double kBf16Unit = 1.0 / 256;
// What f32 adds on top: the exps (~2 ulp), the scores' and outputs' f32 sums (a few hundred
// terms), the rescales of the running output.
constexpr double kF32Slack = 1e-4;
constexpr double kLseTolerance = 2e-5;

double bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs random_inputs(int64_t seqlen, int64_t heads, int64_t hd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  in.q.resize(kSeqs * seqlen * heads * hd);
  in.k.resize(kSeqs * seqlen * kKvHeads * hd);
  in.v.resize(in.k.size());
  // Queries twice as large: peaky rows whose running max moves from block to block.
  for (float& x : in.q) x = 2.0f * normal(rng);
  for (float& x : in.k) x = normal(rng);
  for (float& x : in.v) x = normal(rng);
  return in;
}

// out, lse and the per-output bound sum_j p_j |v_j| / sum_j p_j of the exact softmax over the
// bf16-rounded operands, in double.
struct Reference {
  std::vector<double> out, lse, abs_mean;
};

Reference reference(const Inputs& in, int64_t seqlen, int64_t heads, int64_t hd, float scale) {
  const int64_t group = heads / kKvHeads, q_dim = heads * hd, kv_dim = kKvHeads * hd;
  Reference r;
  r.out.resize(in.q.size());
  r.abs_mean.resize(in.q.size());
  r.lse.resize(kSeqs * heads * seqlen);
  std::vector<double> s(seqlen);
  for (int64_t b = 0; b < kSeqs; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < seqlen; ++i) {
        const float* qi = in.q.data() + (b * seqlen + i) * q_dim + h * hd;
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const float* kj = in.k.data() + (b * seqlen + j) * kv_dim + g * hd;
          double acc = 0;
          for (int64_t d = 0; d < hd; ++d) acc += bf16(qi[d]) * bf16(scale * kj[d]);
          s[j] = acc;
          mx = std::max(mx, acc);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        r.lse[(b * heads + h) * seqlen + i] = mx + std::log(sum);
        for (int64_t d = 0; d < hd; ++d) {
          double o = 0, a = 0;
          for (int64_t j = 0; j <= i; ++j) {
            const double vj = bf16(in.v[(b * seqlen + j) * kv_dim + g * hd + d]);
            o += s[j] * vj;
            a += s[j] * std::fabs(vj);
          }
          r.out[(b * seqlen + i) * q_dim + h * hd + d] = o / sum;
          r.abs_mean[(b * seqlen + i) * q_dim + h * hd + d] = a / sum;
        }
      }
    }
  }
  return r;
}

bool have_kernel() {
  return ops::causal_attention_bf16_runs(64);
}

struct Case {
  int64_t seqlen, head_dim, group;
};

std::string name(const ::testing::TestParamInfo<Case>& info) {
  return "n" + std::to_string(info.param.seqlen) + "_d" + std::to_string(info.param.head_dim) +
         "_g" + std::to_string(info.param.group);
}

class CausalAttentionBf16 : public ::testing::TestWithParam<Case> {};

TEST_P(CausalAttentionBf16, MatchesReferenceAndGemmPath) {
  if (!have_kernel())
    GTEST_SKIP() << "this CPU lacks AVX512-BF16 (or QS_KERNEL forces another ISA)";
  const Case c = GetParam();
  const int64_t heads = kKvHeads * c.group, hd = c.head_dim, n = c.seqlen;
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const Inputs in =
      random_inputs(n, heads, hd, static_cast<uint32_t>(n * 1000 + hd * 10 + c.group));
  ThreadPool pool(2);

  std::vector<float> out(in.q.size(), NAN), lse(kSeqs * heads * n, NAN);
  const ops::CausalAttentionShape cs{kSeqs, n, heads, kKvHeads, hd, scale};
  ASSERT_TRUE(ops::causal_attention_bf16(cs, in.q.data(), in.k.data(), in.v.data(), out.data(),
                                         lse.data(), pool)
                  .ok());

  const Reference ref = reference(in, n, heads, hd, scale);
  double worst_out = 0, worst_lse = 0;  // error / tolerance
  for (size_t i = 0; i < out.size(); ++i) {
    const double tol = (kBf16Unit + kF32Slack) * ref.abs_mean[i] + 1e-6;
    ASSERT_NEAR(out[i], ref.out[i], tol) << "output " << i;
    worst_out = std::max(worst_out, std::fabs(out[i] - ref.out[i]) / tol);
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    ASSERT_NEAR(lse[i], ref.lse[i], kLseTolerance) << "lse " << i;
    worst_lse = std::max(worst_lse, std::fabs(lse[i] - ref.lse[i]) / kLseTolerance);
  }

  // Today's path: Q K^T and P V through ops::gemm per head and 64-row block, P rounded from
  // exp(s - the row's final max) instead of the running one: two roundings of P apart.
  quant::AttentionShape as{
      kSeqs, n, heads, kKvHeads, hd, 0, 1.0 / std::sqrt(double(hd)), ops::Products::kBf16};
  as.fused_bf16 = false;
  std::vector<float> out_gemm(out.size()), lse_gemm(lse.size());
  quant::attention_forward<float>(as, in.q.data(), in.k.data(), in.v.data(), nullptr,
                                  out_gemm.data(), lse_gemm.data(), pool);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], out_gemm[i], 2 * (kBf16Unit + kF32Slack) * ref.abs_mean[i] + 2e-6)
        << "output " << i << " against the GEMM path";
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    ASSERT_NEAR(lse[i], lse_gemm[i], kLseTolerance) << "lse " << i << " against the GEMM path";
  }
  RecordProperty("worst_out_error_over_tolerance", std::to_string(worst_out));
  RecordProperty("worst_lse_error_over_tolerance", std::to_string(worst_lse));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalAttentionBf16,
                         ::testing::Values(Case{1, 64, 1}, Case{7, 64, 3}, Case{64, 64, 3},
                                           Case{65, 64, 1}, Case{200, 64, 3}, Case{513, 64, 3},
                                           Case{1, 128, 3}, Case{7, 128, 1}, Case{64, 128, 1},
                                           Case{65, 128, 3}, Case{200, 128, 1}, Case{513, 128, 1},
                                           Case{1, 80, 1}, Case{7, 80, 3}, Case{64, 80, 1},
                                           Case{65, 80, 3}, Case{200, 80, 3}, Case{513, 80, 1},
                                           Case{130, 2, 1}, Case{97, 256, 3}),
                         name);

// The P rounding is really there: two keys whose probabilities are 1 and exp(-d), with d chosen
// so that exp(-d) is far from a bf16 value; the output is V's average under the rounded weights.
TEST(CausalAttentionBf16Rounding, RoundsProbabilitiesToBf16) {
  if (!have_kernel())
    GTEST_SKIP() << "this CPU lacks AVX512-BF16 (or QS_KERNEL forces another ISA)";
  const int64_t hd = 2;
  ThreadPool pool(1);
  // With scale 1 and q = (1, 0), the scores are k's first components: query 1 sees key 0
  // (score 0, v 0) and key 1 (score -0.3, v 1).
  const std::vector<float> q = {1, 0, 1, 0}, k = {0, 0, -0.3f, 0}, v = {0, 0, 1, 0};
  std::vector<float> out(4), lse(2);
  const ops::CausalAttentionShape cs{1, 2, 1, 1, hd, 1.0f};
  ASSERT_TRUE(
      ops::causal_attention_bf16(cs, q.data(), k.data(), v.data(), out.data(), lse.data(), pool)
          .ok());
  // The running max of row 1 is 0 (key 0): p = {1, exp(-0.3)} before rounding; k's -0.3 is
  // itself rounded to bf16 first.
  const double s1 = bf16(-0.3f), p1 = std::exp(s1), sum = 1 + p1;
  EXPECT_NEAR(lse[1], std::log(sum), 1e-6);
  const double rounded = bf16(static_cast<float>(p1)) / sum, exact = p1 / sum;
  ASSERT_GT(std::fabs(rounded - exact), 1e-4);  // the two are distinguishable
  EXPECT_NEAR(out[2], rounded, 1e-6);
  EXPECT_EQ(out[0], 0.0f);  // query 0 sees only key 0, whose v is 0
}

TEST(CausalAttentionBf16Errors, RefusesWhatItCannotRun) {
  if (!have_kernel())
    GTEST_SKIP() << "this CPU lacks AVX512-BF16 (or QS_KERNEL forces another ISA)";
  ThreadPool pool(1);
  std::vector<float> buf(4096);
  float* p = buf.data();
  EXPECT_FALSE(ops::causal_attention_bf16_runs(63));
  EXPECT_FALSE(ops::causal_attention_bf16_runs(258));
  EXPECT_TRUE(ops::causal_attention_bf16_runs(256));
  const Status odd = ops::causal_attention_bf16({1, 4, 2, 1, 63, 1.0f}, p, p, p, p, p, pool);
  EXPECT_EQ(odd.code(), StatusCode::kUnimplemented) << odd.message();
  const Status groups = ops::causal_attention_bf16({1, 4, 3, 2, 64, 1.0f}, p, p, p, p, p, pool);
  EXPECT_EQ(groups.code(), StatusCode::kInvalidArgument) << groups.message();
  const Status null = ops::causal_attention_bf16({1, 4, 2, 1, 64, 1.0f}, p, nullptr, p, p, p, pool);
  EXPECT_EQ(null.code(), StatusCode::kInvalidArgument) << null.message();
  EXPECT_TRUE(ops::causal_attention_bf16({0, 4, 2, 1, 64, 1.0f}, p, p, p, p, p, pool).ok());
}

// quant::attention_forward runs the fused kernel for float, bf16 products, no mask and no
// window, and the per-block GEMMs otherwise; the AutoRound backward given the fused forward's
// out and lse computes the gradients the GEMM path's give, to the rounding of P.
TEST(CausalAttentionBf16Dispatch, AttentionForwardAndBackward) {
  if (!have_kernel())
    GTEST_SKIP() << "this CPU lacks AVX512-BF16 (or QS_KERNEL forces another ISA)";
  const int64_t n = 150, group = 3, heads = kKvHeads * group, hd = 64;
  const Inputs in = random_inputs(n, heads, hd, 77);
  ThreadPool pool(2);
  quant::AttentionShape as{kSeqs, n, heads, kKvHeads, hd, 0, 0.125, ops::Products::kBf16};
  std::vector<float> out(in.q.size()), lse(kSeqs * heads * n);
  quant::attention_forward<float>(as, in.q.data(), in.k.data(), in.v.data(), nullptr, out.data(),
                                  lse.data(), pool);
  std::vector<float> out_ops(out.size()), lse_ops(lse.size());
  ASSERT_TRUE(ops::causal_attention_bf16({kSeqs, n, heads, kKvHeads, hd, 0.125f}, in.q.data(),
                                         in.k.data(), in.v.data(), out_ops.data(), lse_ops.data(),
                                         pool)
                  .ok());
  EXPECT_EQ(out, out_ops);
  EXPECT_EQ(lse, lse_ops);

  quant::AttentionShape old = as;
  old.fused_bf16 = false;
  std::vector<float> out_old(out.size()), lse_old(lse.size());
  quant::attention_forward<float>(old, in.q.data(), in.k.data(), in.v.data(), nullptr,
                                  out_old.data(), lse_old.data(), pool);
  EXPECT_NE(out, out_old);  // P rounded from another max: not bit-identical

  // A mask (even all ones), a window or f32 products keep the GEMM path, bit for bit.
  const std::vector<uint8_t> mask(kSeqs * n, 1);
  std::vector<float> out_mask(out.size()), lse_mask(lse.size());
  quant::attention_forward<float>(as, in.q.data(), in.k.data(), in.v.data(), mask.data(),
                                  out_mask.data(), lse_mask.data(), pool);
  EXPECT_EQ(out_mask, out_old);
  quant::AttentionShape window = as;
  window.sliding_window = n;  // covers every key: the same attention, through the old path
  quant::AttentionShape window_old = window;
  window_old.fused_bf16 = false;
  std::vector<float> out_w(out.size()), out_w_old(out.size());
  quant::attention_forward<float>(window, in.q.data(), in.k.data(), in.v.data(), nullptr,
                                  out_w.data(), lse_mask.data(), pool);
  quant::attention_forward<float>(window_old, in.q.data(), in.k.data(), in.v.data(), nullptr,
                                  out_w_old.data(), lse_mask.data(), pool);
  EXPECT_EQ(out_w, out_w_old);

  // The backward recomputes P from lse (with unscaled K, scaling the scores): fed either
  // forward, it gives the same gradients to P's rounding.
  std::mt19937 rng(78);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> dout(out.size());
  for (float& x : dout) x = normal(rng);
  auto backward = [&](const std::vector<float>& o, const std::vector<float>& l,
                      std::vector<float>* dq, std::vector<float>* dk, std::vector<float>* dv) {
    dq->resize(in.q.size());
    dk->resize(in.k.size());
    dv->resize(in.v.size());
    quant::attention_backward<float>(as, in.q.data(), in.k.data(), in.v.data(), nullptr, o.data(),
                                     l.data(), dout.data(), dq->data(), dk->data(), dv->data(),
                                     pool);
  };
  std::vector<float> dq, dk, dv, dq_old, dk_old, dv_old;
  backward(out, lse, &dq, &dk, &dv);
  backward(out_old, lse_old, &dq_old, &dk_old, &dv_old);
  auto expect_close = [](const char* what, const std::vector<float>& a,
                         const std::vector<float>& b) {
    double scale = 0, worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(a[i])) << what << " " << i;
      scale = std::max(scale, std::fabs(double(b[i])));
      worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
    }
    // out moves by at most 2 x 2^-8 of |v|, lse by 2e-5: the gradients by a few 2^-8 of their
    // largest entry.
    EXPECT_LE(worst, 4 * kBf16Unit * scale) << what << ": largest entry " << scale;
  };
  expect_close("dq", dq, dq_old);
  expect_close("dk", dk, dk_old);
  expect_close("dv", dv, dv_old);
}

}  // namespace
}  // namespace qs
