// quant: the Wan block's backward (wan_block.h) against central finite differences of its
// double-precision forward, from a loss <r, y> into the block input and each of its ten linears'
// weights; with and without norm2 (cross_attn_norm), with one timestep per sample and one per
// token (TI2V's expand_timesteps). The float forward is checked against the double one.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "quant/wan_block.h"
#include "quant_grad_test_util.h"

namespace qs::quant {
namespace {

using testing::dot;
using testing::expect_matches_fd;
using testing::random_vec;

struct WanCase {
  const char* name;
  int64_t dim, n_heads, ffn, seq, n_text;
  bool cross_attn_norm, per_token;
};

void PrintTo(const WanCase& c, std::ostream* os) {
  *os << c.name;
}

WanBlockTensors<double> random_block(const WanCase& c, std::mt19937& rng) {
  WanBlockTensors<double> b;
  b.dim = c.dim;
  b.n_heads = c.n_heads;
  b.head_dim = c.dim / c.n_heads;
  b.ffn_dim = c.ffn;
  b.cross_attn_norm = c.cross_attn_norm;
  const auto d = static_cast<size_t>(c.dim);
  b.scale_shift_table = random_vec(rng, 6 * d, -0.5, 0.5);
  b.norm_q = random_vec(rng, d, 0.5, 1.5);
  b.norm_k = random_vec(rng, d, 0.5, 1.5);
  b.norm_q2 = random_vec(rng, d, 0.5, 1.5);
  b.norm_k2 = random_vec(rng, d, 0.5, 1.5);
  if (c.cross_attn_norm) {
    b.norm2_w = random_vec(rng, d, 0.5, 1.5);
    b.norm2_b = random_vec(rng, d, -0.2, 0.2);
  }
  b.w.resize(kWanLinears);
  b.bias.resize(kWanLinears);
  for (int i = 0; i < kWanLinears; ++i) {
    const double s = 1.0 / std::sqrt(static_cast<double>(b.in_features(i)));
    b.w[i] = random_vec(rng, b.out_features(i) * b.in_features(i), -s, s);
    b.bias[i] = random_vec(rng, b.out_features(i), -0.1, 0.1);
  }
  return b;
}

struct Sample {
  std::vector<double> tproj, text, cos, sin;
  WanConditioning<double> cond;
};

Sample random_sample(const WanCase& c, int64_t head_dim, std::mt19937& rng) {
  Sample s;
  const int64_t n_mod = c.per_token ? c.seq : 1;
  s.tproj = random_vec(rng, n_mod * 6 * c.dim, -0.5, 0.5);
  s.text = random_vec(rng, c.n_text * c.dim);
  const std::vector<double> angle = random_vec(rng, c.seq * head_dim / 2, -3.0, 3.0);
  for (double a : angle) {
    s.cos.push_back(std::cos(a));
    s.sin.push_back(std::sin(a));
  }
  s.cond = {c.seq, c.n_text, n_mod, s.tproj.data(), s.text.data(), s.cos.data(), s.sin.data()};
  return s;
}

class WanBlockGrad : public ::testing::TestWithParam<WanCase> {};

TEST_P(WanBlockGrad, MatchesFiniteDifferences) {
  const WanCase& c = GetParam();
  std::mt19937 rng(7);
  WanBlockTensors<double> b = random_block(c, rng);
  const Sample s = random_sample(c, b.head_dim, rng);
  std::vector<double> x = random_vec(rng, c.seq * c.dim);
  const std::vector<double> r = random_vec(rng, c.seq * c.dim);
  ThreadPool pool(2);
  auto ptrs = [&] {
    PerLinear<const double*> w(kWanLinears);
    for (int i = 0; i < kWanLinears; ++i) w[i] = b.w[i].data();
    return w;
  };
  WanBlockActivations<double> act;
  std::vector<double> y(x.size());
  auto loss = [&] {
    wan_block_forward<double>(b, ptrs(), s.cond, x.data(), &act, y.data(), pool);
    return dot(r, y);
  };
  loss();
  std::vector<double> dx(x.size(), 0.0);
  PerLinear<std::vector<double>> dw(kWanLinears);
  PerLinear<double*> dwp(kWanLinears);
  for (int i = 0; i < kWanLinears; ++i) {
    dw[i].assign(b.w[i].size(), 0.0);
    dwp[i] = dw[i].data();
  }
  wan_block_backward<double>(b, ptrs(), s.cond, act, r.data(), dx.data(), dwp, pool);
  expect_matches_fd("dx", x, dx, loss);
  for (int i = 0; i < kWanLinears; ++i) {
    expect_matches_fd(wan_linear_name(i), b.w[i], dw[i], loss, 3);
  }
  // The float block on the same numbers agrees with the double one to float rounding.
  WanBlockTensors<float> bf;
  bf.dim = b.dim;
  bf.n_heads = b.n_heads;
  bf.head_dim = b.head_dim;
  bf.ffn_dim = b.ffn_dim;
  bf.cross_attn_norm = b.cross_attn_norm;
  auto to_f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  bf.scale_shift_table = to_f(b.scale_shift_table);
  bf.norm_q = to_f(b.norm_q);
  bf.norm_k = to_f(b.norm_k);
  bf.norm_q2 = to_f(b.norm_q2);
  bf.norm_k2 = to_f(b.norm_k2);
  bf.norm2_w = to_f(b.norm2_w);
  bf.norm2_b = to_f(b.norm2_b);
  PerLinear<const float*> wf(kWanLinears);
  for (int i = 0; i < kWanLinears; ++i) {
    bf.w.push_back(to_f(b.w[i]));
    bf.bias.push_back(to_f(b.bias[i]));
  }
  for (int i = 0; i < kWanLinears; ++i) wf[i] = bf.w[i].data();
  ASSERT_TRUE(check_wan_block(bf, "block").ok());
  const std::vector<float> tf = to_f(s.tproj), xf = to_f(x), textf = to_f(s.text), cf = to_f(s.cos),
                           sf = to_f(s.sin);
  const WanConditioning<float> cond{c.seq,        c.n_text,  s.cond.n_mod, tf.data(),
                                    textf.data(), cf.data(), sf.data()};
  WanBlockActivations<float> actf;
  std::vector<float> yf(x.size());
  wan_block_forward<float>(bf, wf, cond, xf.data(), &actf, yf.data(), pool);
  loss();
  for (size_t e = 0; e < y.size(); ++e) ASSERT_NEAR(yf[e], y[e], 1e-4 * (1 + std::abs(y[e])));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, WanBlockGrad,
    ::testing::Values(WanCase{"norm2", 8, 2, 12, 6, 3, true, false},
                      WanCase{"no_norm2_per_token", 8, 2, 12, 5, 4, false, true},
                      WanCase{"one_head", 6, 1, 10, 4, 2, true, true}),
    [](const ::testing::TestParamInfo<WanCase>& i) { return std::string(i.param.name); });

TEST(WanBlock, RejectsInconsistentShapes) {
  WanBlockTensors<float> b;
  b.dim = 8;
  b.n_heads = 3;
  b.head_dim = 2;
  b.ffn_dim = 4;
  EXPECT_FALSE(check_wan_block(b, "blocks.0").ok());
}

}  // namespace
}  // namespace qs::quant
