// kernels: the image pipeline's ops against their scalar oracles (conv2d as im2col + GEMM vs
// direct convolution; dense attention on the GEMM vs one-row-at-a-time softmax), and the
// oracles themselves against values worked out by hand.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ref/activation_ref.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/ref/rope_ref.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/dense_attention.h"

namespace qs {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "at " << i;
}

TEST(DiffusionOps, Conv2dMatchesDirectConvolution) {
  ThreadPool pool(2);
  std::vector<ops::Conv2dShape> cases = {
      {2, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1, 1},  // VAE's 3x3 "same" conv
      {1, 4, 8, 8, 6, 3, 3, 2, 0, 1, 0, 1},  // its stride-2 downsample, padded (0, 1, 0, 1)
      {1, 5, 6, 4, 7, 1, 1, 1, 0, 0, 0, 0},  // 1x1 shortcut
      {1, 2, 13, 11, 3, 4, 2, 3, 2, 0, 1, 2},
  };
  uint32_t seed = 1;
  for (const auto& s : cases) {
    auto x = randn(s.n * s.c_in * s.h * s.w, seed++);
    auto w = randn(s.c_out * s.c_in * s.kh * s.kw, seed++);
    auto b = randn(s.c_out, seed++);
    const size_t ny = s.n * s.c_out * s.out_h() * s.out_w();
    std::vector<float> got(ny), want(ny);
    ASSERT_TRUE(ops::conv2d(x.data(), s, w.data(), b.data(), got.data(), pool).ok());
    kernels::ref::conv2d(x.data(), s, w.data(), b.data(), want.data());
    expect_near_all(got, want, 1e-4f);
  }
  ops::Conv2dShape bad{1, 1, 2, 2, 1, 3, 3};
  std::vector<float> one(9);
  EXPECT_FALSE(ops::conv2d(one.data(), bad, one.data(), nullptr, one.data(), pool).ok());
}

TEST(DiffusionOps, UpsampleRepeatsEachPixelTwice) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // [1, 1, 2, 3]
  std::vector<float> y(24);
  ops::upsample_nearest2x(x.data(), 1, 1, 2, 3, y.data());
  const std::vector<float> want = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3,
                                   4, 4, 5, 5, 6, 6, 4, 4, 5, 5, 6, 6};
  EXPECT_EQ(y, want);
}

TEST(DiffusionOps, DenseAttentionMatchesReference) {
  ThreadPool pool(2);
  for (bool causal : {false, true}) {
    for (bool with_bias : {false, true}) {
      // 70 queries cross a 64-query block; strides wider than a row, as in a fused qkv.
      const int64_t n = 70, heads = 3, hd = 8, row = heads * hd, stride = 3 * row;
      auto qkv = randn(n * stride, 7);
      auto bias = randn(heads * n * n, 8);
      ops::DenseAttentionShape s{n,
                                 n,
                                 heads,
                                 hd,
                                 stride,
                                 stride,
                                 stride,
                                 row,
                                 1.0f / std::sqrt(8.0f),
                                 causal,
                                 with_bias ? bias.data() : nullptr};
      std::vector<float> got(n * row), want(n * row);
      ASSERT_TRUE(ops::dense_attention(qkv.data(), qkv.data() + row, qkv.data() + 2 * row, s,
                                       got.data(), pool)
                      .ok());
      kernels::ref::dense_attention(qkv.data(), qkv.data() + row, qkv.data() + 2 * row, s,
                                    want.data());
      expect_near_all(got, want, 1e-5f);
    }
  }
  ops::DenseAttentionShape bad{4, 2, 1, 4, 4, 4, 4, 4, 1.0f, true};
  std::vector<float> buf(16);
  EXPECT_FALSE(
      ops::dense_attention(buf.data(), buf.data(), buf.data(), bad, buf.data(), pool).ok());
}

TEST(DiffusionOps, ActivationsAtKnownPoints) {
  // torch: F.gelu(1) = 0.8413447, F.gelu(1, approximate="tanh") = 0.8411920,
  // 1 * sigmoid(1.702) = 0.8457957, F.silu(1) = 0.7310586.
  float a[] = {1, -1}, b[] = {1, -1}, c[] = {1, 0}, d[] = {1, 0};
  kernels::ref::gelu_erf(a, 2);
  kernels::ref::gelu_tanh(b, 2);
  kernels::ref::quick_gelu(c, 2);
  kernels::ref::silu(d, 2);
  EXPECT_NEAR(a[0], 0.8413447f, 1e-6f);
  EXPECT_NEAR(a[1], -0.1586553f, 1e-6f);
  EXPECT_NEAR(b[0], 0.8411920f, 1e-6f);
  EXPECT_NEAR(c[0], 0.8457957f, 1e-6f);
  EXPECT_EQ(c[1], 0.0f);
  EXPECT_NEAR(d[0], 0.7310586f, 1e-6f);
}

TEST(DiffusionOps, NormsByHand) {
  // LayerNorm of (1, 2, 3, 4): mean 2.5, var 1.25.
  std::vector<float> x = {1, 2, 3, 4}, y(4);
  const float w[] = {1, 2, 1, 1}, bias[] = {0, 0, 0, 10};
  kernels::ref::layer_norm(x.data(), 1, 4, w, bias, 0.0f, y.data());
  const float inv = 1.0f / std::sqrt(1.25f);
  EXPECT_NEAR(y[0], -1.5f * inv, 1e-6f);
  EXPECT_NEAR(y[1], -1.0f * inv, 1e-6f);
  EXPECT_NEAR(y[3], 1.5f * inv + 10, 1e-5f);
  // GroupNorm with 2 groups of 1 channel x 2 pixels: each group normalized alone.
  std::vector<float> g = {0, 2, 10, 14}, gy(4);
  const float gw[] = {1, 3}, gb[] = {0, 1};
  ops::group_norm(g.data(), 1, 2, 2, 2, gw, gb, 0.0f, gy.data());
  EXPECT_NEAR(gy[0], -1.0f, 1e-6f);
  EXPECT_NEAR(gy[1], 1.0f, 1e-6f);
  EXPECT_NEAR(gy[2], -3.0f + 1, 1e-6f);
  EXPECT_NEAR(gy[3], 3.0f + 1, 1e-6f);
}

TEST(DiffusionOps, RopeRotatesEachPairByItsAngle) {
  // One token, one head, two pairs: rotated by 90 and 0 degrees.
  float x[] = {1, 2, 3, 4};
  const float cos[] = {0, 1}, sin[] = {1, 0};
  kernels::ref::rope_interleaved(x, 1, 4, 1, 4, cos, sin);
  EXPECT_FLOAT_EQ(x[0], -2);
  EXPECT_FLOAT_EQ(x[1], 1);
  EXPECT_FLOAT_EQ(x[2], 3);
  EXPECT_FLOAT_EQ(x[3], 4);
}

}  // namespace
}  // namespace qs
