// quant: each hand-written backward of grad_ops.h and fake_quant.h against central finite
// differences of its forward, all in double; the float instantiations (on ops' kernels)
// against the double ones; and the fake-quant forward against formats::rtn_quantize.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "formats/rtn.h"
#include "quant/fake_quant.h"
#include "quant/grad_ops.h"
#include "quant_grad_test_util.h"

namespace qs::quant {
namespace {

using testing::dot;
using testing::expect_matches_fd;
using testing::random_vec;

TEST(QuantGradOps, RmsNormMatchesFiniteDifferences) {
  std::mt19937 rng(1);
  const int64_t m = 5, d = 16;
  std::vector<double> x = random_vec(rng, m * d), w = random_vec(rng, d, 0.5, 1.5);
  const std::vector<double> r = random_vec(rng, m * d);
  std::vector<double> y(m * d), inv(m), dx(m * d);
  auto loss = [&] {
    rms_norm_forward<double>(x.data(), m, d, w.data(), 1e-6, y.data(), inv.data());
    return dot(r, y);
  };
  loss();
  rms_norm_backward<double>(x.data(), inv.data(), r.data(), m, d, w.data(), dx.data(), false);
  expect_matches_fd("rms_norm dx", x, dx, loss);
}

TEST(QuantGradOps, RopeMatchesFiniteDifferences) {
  std::mt19937 rng(2);
  const int64_t tokens = 3, heads = 2, hd = 8;
  std::vector<double> x = random_vec(rng, tokens * heads * hd);
  const std::vector<double> angle = random_vec(rng, tokens * hd / 2, -3, 3);
  std::vector<double> cos(angle.size()), sin(angle.size());
  for (size_t i = 0; i < angle.size(); ++i)
    cos[i] = std::cos(angle[i]), sin[i] = std::sin(angle[i]);
  const std::vector<double> r = random_vec(rng, x.size());
  auto loss = [&] {
    std::vector<double> y = x;
    rope_forward<double>(y.data(), tokens, heads, hd, cos.data(), sin.data());
    return dot(r, y);
  };
  std::vector<double> dx = r;
  rope_backward<double>(dx.data(), tokens, heads, hd, cos.data(), sin.data());
  expect_matches_fd("rope dx", x, dx, loss);
}

TEST(QuantGradOps, SiluMulMatchesFiniteDifferences) {
  std::mt19937 rng(3);
  const int64_t n = 40;
  std::vector<double> gate = random_vec(rng, n, -4, 4), up = random_vec(rng, n);
  const std::vector<double> r = random_vec(rng, n);
  std::vector<double> out(n), dg(n), du(n);
  auto loss = [&] {
    silu_mul_forward<double>(gate.data(), up.data(), n, out.data());
    return dot(r, out);
  };
  silu_mul_backward<double>(gate.data(), up.data(), r.data(), n, dg.data(), du.data());
  expect_matches_fd("silu_mul dgate", gate, dg, loss);
  expect_matches_fd("silu_mul dup", up, du, loss);
}

TEST(QuantGradOps, LinearMatchesFiniteDifferences) {
  std::mt19937 rng(4);
  ThreadPool pool(1);
  const int64_t m = 6, k = 9, n = 7;
  std::vector<double> x = random_vec(rng, m * k), w = random_vec(rng, n * k);
  const std::vector<double> bias = random_vec(rng, n), r = random_vec(rng, m * n);
  std::vector<double> y(m * n), dx(m * k, 0.5), dw(n * k, 0.25);
  auto loss = [&] {
    linear_forward<double>(x.data(), m, k, w.data(), n, bias.data(), y.data(), pool);
    return dot(r, y);
  };
  // accumulate = true adds to what is there: subtract the initial fill after.
  linear_backward<double>(x.data(), r.data(), m, k, w.data(), n, dx.data(), dw.data(), true, pool);
  for (double& v : dx) v -= 0.5;
  for (double& v : dw) v -= 0.25;
  expect_matches_fd("linear dx", x, dx, loss);
  expect_matches_fd("linear dw", w, dw, loss);
}

struct AttnCase {
  int64_t heads, kv_heads, window;
  bool padded;
  int64_t seqlen = 7;
  size_t fd_stride = 1;  // long sequences: finite differences on every stride-th entry
};

class QuantAttentionGrad : public ::testing::TestWithParam<AttnCase> {};

TEST_P(QuantAttentionGrad, MatchesFiniteDifferences) {
  const AttnCase c = GetParam();
  std::mt19937 rng(5);
  ThreadPool pool(2);
  AttentionShape s{2, c.seqlen, c.heads, c.kv_heads, 4, c.window, 0.5};
  const int64_t tokens = s.n_seqs * s.seqlen;
  // Sequence 1 is left-padded by two positions, so its first two queries see no key.
  std::vector<uint8_t> mask(tokens, 1);
  if (c.padded) mask[s.seqlen] = mask[s.seqlen + 1] = 0;
  std::vector<double> q = random_vec(rng, tokens * c.heads * 4, -2, 2);
  std::vector<double> k = random_vec(rng, tokens * c.kv_heads * 4, -2, 2);
  std::vector<double> v = random_vec(rng, tokens * c.kv_heads * 4);
  const std::vector<double> r = random_vec(rng, q.size());
  std::vector<double> out(q.size()), lse(s.n_seqs * c.heads * s.seqlen);
  // The thousands of finite-difference forwards run inline: waking a worker per call costs
  // more than the call on a loaded machine.
  ThreadPool serial(1);
  auto loss = [&] {
    attention_forward<double>(s, q.data(), k.data(), v.data(), mask.data(), out.data(), lse.data(),
                              serial);
    return dot(r, out);
  };
  attention_forward<double>(s, q.data(), k.data(), v.data(), mask.data(), out.data(), lse.data(),
                            pool);
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  attention_backward<double>(s, q.data(), k.data(), v.data(), mask.data(), out.data(), lse.data(),
                             r.data(), dq.data(), dk.data(), dv.data(), pool);
  expect_matches_fd("attention dq", q, dq, loss, c.fd_stride);
  expect_matches_fd("attention dk", k, dk, loss, c.fd_stride);
  expect_matches_fd("attention dv", v, dv, loss, c.fd_stride);
  if (c.padded) {
    for (int64_t t = s.seqlen; t < s.seqlen + 2; ++t)
      for (int64_t j = 0; j < c.heads * 4; ++j) EXPECT_EQ(out[t * c.heads * 4 + j], 0.0);
  }

  // The float path (ops::gemm kernels) computes the same values.
  std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end());
  std::vector<float> rf(r.begin(), r.end()), outf(out.size()), lsef(lse.size());
  std::vector<float> dqf(q.size()), dkf(k.size()), dvf(v.size());
  attention_forward<float>(s, qf.data(), kf.data(), vf.data(), mask.data(), outf.data(),
                           lsef.data(), pool);
  attention_backward<float>(s, qf.data(), kf.data(), vf.data(), mask.data(), outf.data(),
                            lsef.data(), rf.data(), dqf.data(), dkf.data(), dvf.data(), pool);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(outf[i], out[i], 1e-5);
  for (size_t i = 0; i < dq.size(); ++i) EXPECT_NEAR(dqf[i], dq[i], 1e-4);
  for (size_t i = 0; i < dk.size(); ++i) EXPECT_NEAR(dkf[i], dk[i], 1e-4);
  for (size_t i = 0; i < dv.size(); ++i) EXPECT_NEAR(dvf[i], dv[i], 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantAttentionGrad,
                         ::testing::Values(AttnCase{4, 2, 0, true}, AttnCase{4, 4, 0, false},
                                           AttnCase{6, 2, 3, true}, AttnCase{2, 1, 0, false},
                                           // several 64-query blocks, partial last one
                                           AttnCase{2, 1, 0, true, 150, 37},
                                           AttnCase{2, 2, 70, false, 130, 29}));

struct QuantCase {
  int bits;
  int64_t group_size;
  bool sym;
};

class QuantFakeQuantGrad : public ::testing::TestWithParam<QuantCase> {};

// V, alpha and beta away from their initial values so that the extremes saturate the clamp
// and the gradient of every term (code clamp, zero point, scale branch) is exercised.
TEST_P(QuantFakeQuantGrad, MatchesFiniteDifferencesOfFrozenRounding) {
  const QuantCase c = GetParam();
  std::mt19937 rng(6 + c.bits);
  const int64_t n = 3, k = 20;  // k = 20 with groups of 8: a partial last group
  const std::vector<double> w = random_vec(rng, n * k, -0.1, 0.1);
  FakeQuantLinear<double> l = make_fake_quant<double>(w.data(), n, k, c.bits, c.group_size, c.sym);
  l.v = random_vec(rng, n * k, -0.3, 0.3);
  l.alpha = random_vec(rng, l.alpha.size(), 0.6, 0.95);
  l.beta = random_vec(rng, l.beta.size(), 0.6, 0.95);
  const std::vector<double> r = random_vec(rng, n * k);
  std::vector<double> wq(n * k);
  QdqCache<double> cache;
  FrozenRounding<double> frozen;
  qdq_forward<double>(l, wq.data(), &cache, &frozen);
  std::vector<double> dv(n * k), da(l.alpha.size()), db(l.beta.size());
  qdq_backward<double>(l, cache, r.data(), dv.data(), da.data(), db.data());
  frozen.replay = true;
  auto loss = [&] {
    QdqCache<double> cc;
    qdq_forward<double>(l, wq.data(), &cc, &frozen);
    return dot(r, wq);
  };
  expect_matches_fd("qdq dV", l.v, dv, loss);
  expect_matches_fd("qdq dalpha", l.alpha, da, loss);
  expect_matches_fd("qdq dbeta", l.beta, db, loss);
  // Some codes saturate (so the clamp's zero gradient is tested) and most do not.
  const int64_t zeros = std::count(dv.begin(), dv.end(), 0.0);
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, n * k / 2);
}

INSTANTIATE_TEST_SUITE_P(Schemes, QuantFakeQuantGrad,
                         ::testing::Values(QuantCase{4, 8, true}, QuantCase{4, 8, false},
                                           QuantCase{2, -1, true}, QuantCase{3, 8, false}));

// At V = 0, alpha = beta = 1 the QDQ is plain RTN (autoround.md §1.3 "Pure RTN"): the same
// codes, scales and zeros as formats::rtn_quantize, and dequantize() of the export equals the
// QDQ weight the tuning saw.
TEST(QuantFakeQuant, InitialStateIsRtn) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t n = 16, k = 200;
  std::vector<float> w(n * k);
  for (float& v : w) v = normal(rng);
  w[5] = 0.0f;
  for (int64_t c = 0; c < 64; ++c) w[3 * k + c] = 0.0f;  // an all-zero group hits the floor
  for (const bool sym : {true, false}) {
    for (const int bits : {2, 4, 8}) {
      for (const int64_t gs : {int64_t{-1}, int64_t{32}, int64_t{64}, int64_t{256}}) {
        const FakeQuantLinear<float> l = make_fake_quant<float>(w.data(), n, k, bits, gs, sym);
        std::vector<float> wq(n * k), deq(n * k);
        QdqCache<float> cache;
        qdq_forward<float>(l, wq.data(), &cache);
        const formats::QuantizedWeight got = to_quantized_weight(l, cache);
        const formats::QuantizedWeight want = formats::rtn_quantize(w.data(), n, k, bits, gs, sym);
        EXPECT_EQ(got.codes, want.codes) << bits << " " << gs << " " << sym;
        EXPECT_EQ(got.scales, want.scales) << bits << " " << gs << " " << sym;
        EXPECT_EQ(got.zeros, want.zeros) << bits << " " << gs << " " << sym;
        EXPECT_EQ(got.group_size, want.group_size);
        formats::dequantize(got, deq.data());
        EXPECT_EQ(deq, wq) << bits << " " << gs << " " << sym;
      }
    }
  }
}

}  // namespace
}  // namespace qs::quant
