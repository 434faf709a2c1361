// unit: ops::conv3d (im2col + GEMM in per-thread bands) against the direct oracle
// kernels::ref::conv3d on the shapes Wan's VAE runs (causal 3x3x3, the stride-2 time
// convolution, the 2-D stride-2 downsample as kt = 1, 1x1x1) and on awkward ones (uneven
// strides and padding, one input channel, bands that split output rows and frames); the oracle
// itself against hand-worked values and against the 2-D oracle; the per-thread scratch bound; and
// the shape errors.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ref/conv_ref.h"
#include "ops/conv3d.h"

namespace qs {
namespace {

using ops::Conv3dShape;

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

int64_t in_numel(const Conv3dShape& s) {
  return s.n * s.c_in * s.t * s.h * s.w;
}
int64_t w_numel(const Conv3dShape& s) {
  return s.c_out * s.c_in * s.kt * s.kh * s.kw;
}
int64_t out_numel(const Conv3dShape& s) {
  return s.n * s.c_out * s.out_t() * s.out_h() * s.out_w();
}

Conv3dShape shape(int64_t n, int64_t c_in, int64_t t, int64_t h, int64_t w, int64_t c_out,
                  int64_t kt, int64_t kh, int64_t kw) {
  Conv3dShape s{n, c_in, t, h, w, c_out, kt, kh, kw};
  return s;
}

TEST(Conv3dOracle, HandWorkedValues) {
  // x [1, 1, 2, 2, 2] = 1..8; a 2x2x2 all-ones kernel with bias 0.5 sums everything once.
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}, ones(8, 1.0f), y(1);
  const float bias = 0.5f;
  kernels::ref::conv3d(x.data(), shape(1, 1, 2, 2, 2, 1, 2, 2, 2), ones.data(), &bias, y.data());
  EXPECT_EQ(y[0], 36.5f);
  // A kernel that only reads its (2, 0, 0) tap (the current frame, top-left), with causal time
  // padding (2, 0) and one pixel of spatial padding: output (f, i, j) is x[f, i - 1, j - 1],
  // zero where that is outside.
  Conv3dShape s = shape(1, 1, 2, 2, 2, 1, 3, 3, 3);
  s.pad_front = 2, s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = 1;
  std::vector<float> k(27, 0.0f), out(2 * 2 * 2);
  k[2 * 9] = 1.0f;
  kernels::ref::conv3d(x.data(), s, k.data(), nullptr, out.data());
  EXPECT_EQ(out, std::vector<float>({0, 0, 0, 1, 0, 0, 0, 5}));
  // Stride 2 in time over 5 frames, no padding: frames 0..2 and 2..4 of a (1, 1, 1) sum.
  std::vector<float> frames = {1, 2, 4, 8, 16}, tk = {1, 1, 1}, t_out(2);
  Conv3dShape st = shape(1, 1, 5, 1, 1, 1, 3, 1, 1);
  st.stride_t = 2;
  kernels::ref::conv3d(frames.data(), st, tk.data(), nullptr, t_out.data());
  EXPECT_EQ(t_out, std::vector<float>({7, 28}));
}

TEST(Conv3dOracle, OneFrameKernelIsTheTwoDimensionalConvolution) {
  // [c_in, t, h, w] with kt = 1 is conv2d over the frames taken as a batch.
  const int64_t c_in = 3, t = 4, h = 7, w = 6, c_out = 5;
  auto x = randn(c_in * t * h * w, 1), k = randn(c_out * c_in * 9, 2), b = randn(c_out, 3);
  Conv3dShape s = shape(1, c_in, t, h, w, c_out, 1, 3, 3);
  s.stride_h = s.stride_w = 2, s.pad_bottom = s.pad_right = 1;
  std::vector<float> y3(static_cast<size_t>(out_numel(s)));
  kernels::ref::conv3d(x.data(), s, k.data(), b.data(), y3.data());
  // The same frames as a batch [t, c_in, h, w].
  std::vector<float> frames(x.size());
  for (int64_t c = 0; c < c_in; ++c)
    for (int64_t f = 0; f < t; ++f)
      for (int64_t p = 0; p < h * w; ++p)
        frames[(f * c_in + c) * h * w + p] = x[(c * t + f) * h * w + p];
  kernels::ref::Conv2dShape s2{t, c_in, h, w, c_out, 3, 3, 2, 0, 1, 0, 1};
  std::vector<float> y2(static_cast<size_t>(t * c_out * s2.out_h() * s2.out_w()));
  kernels::ref::conv2d(frames.data(), s2, k.data(), b.data(), y2.data());
  const int64_t ohw = s2.out_h() * s2.out_w();
  ASSERT_EQ(s.out_t(), t);
  for (int64_t c = 0; c < c_out; ++c)
    for (int64_t f = 0; f < t; ++f)
      for (int64_t p = 0; p < ohw; ++p)
        ASSERT_FLOAT_EQ(y3[(c * t + f) * ohw + p], y2[(f * c_out + c) * ohw + p]);
}

struct Case {
  const char* what;
  Conv3dShape s;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  Conv3dShape s = shape(1, 4, 5, 7, 9, 6, 3, 3, 3);  // WanCausalConv3d(k 3, padding 1)
  s.pad_front = 2, s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = 1;
  out.push_back({"causal 3x3x3", s});
  s = shape(1, 5, 5, 6, 4, 5, 3, 1, 1);  // downsample3d's time_conv, stride 2 in time
  s.stride_t = 2;
  out.push_back({"time conv stride 2", s});
  s = shape(2, 3, 2, 8, 9, 4, 1, 3, 3);  // downsample2d: ZeroPad2d((0, 1, 0, 1)), stride 2
  s.stride_h = s.stride_w = 2, s.pad_bottom = s.pad_right = 1;
  out.push_back({"2-D downsample", s});
  out.push_back({"1x1x1", shape(2, 7, 3, 5, 6, 9, 1, 1, 1)});
  s = shape(1, 1, 4, 6, 5, 3, 3, 3, 3);
  s.pad_front = 2, s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = 1;
  out.push_back({"c_in 1", s});
  s = shape(1, 3, 7, 11, 10, 4, 2, 4, 3);
  s.stride_t = 2, s.stride_h = 3, s.stride_w = 2;
  s.pad_front = 1, s.pad_back = 2, s.pad_bottom = 2, s.pad_left = 3, s.pad_right = 1;
  out.push_back({"uneven strides and padding", s});
  // 1080 unfolded rows: bands of 970 (one thread) or 328 (four) positions out of 3 * 19 * 23,
  // so bands end mid-row and mid-frame.
  s = shape(1, 40, 3, 19, 23, 12, 3, 3, 3);
  s.pad_front = 2, s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = 1;
  out.push_back({"several bands", s});
  out.push_back({"1x1x1 in bands", shape(2, 16, 4, 21, 17, 24, 1, 1, 1)});
  return out;
}

TEST(Conv3d, MatchesDirectConvolution) {
  for (int threads : {1, 3, 4}) {
    ThreadPool pool(threads);
    uint32_t seed = 10;
    for (const Case& c : cases()) {
      const Conv3dShape& s = c.s;
      auto x = randn(in_numel(s), seed++), k = randn(w_numel(s), seed++);
      auto b = randn(s.c_out, seed++);
      for (bool with_bias : {true, false}) {
        const float* bias = with_bias ? b.data() : nullptr;
        std::vector<float> got(static_cast<size_t>(out_numel(s)), -7.0f), want(got.size());
        ASSERT_TRUE(ops::conv3d(x.data(), s, k.data(), bias, got.data(), pool).ok()) << c.what;
        kernels::ref::conv3d(x.data(), s, k.data(), bias, want.data());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i])))
              << c.what << ", " << threads << " threads, bias " << with_bias << ", at " << i;
        }
      }
    }
  }
}

TEST(Conv3d, ScratchDoesNotGrowWithTheFrame) {
  // Wan2.1's last level: 96 channels, 3x3x3, four frames (and their two cached ones).
  Conv3dShape big = shape(1, 96, 6, 480, 832, 96, 3, 3, 3);
  big.pad_top = big.pad_bottom = big.pad_left = big.pad_right = 1;
  Conv3dShape small = big;
  small.h = 240, small.w = 416;
  const ops::Conv3dScratch at_480 = ops::conv3d_scratch(big, 16);
  const ops::Conv3dScratch at_240 = ops::conv3d_scratch(small, 16);
  EXPECT_EQ(at_480.column_floats, at_240.column_floats);
  EXPECT_EQ(at_480.packing_floats, at_240.packing_floats);
  // 4 MB a thread, against 1.6 GB for the whole unfolding.
  EXPECT_GT(at_480.column_floats, 0);
  EXPECT_LE(at_480.column_floats, int64_t{1} << 20);
  EXPECT_LT(at_480.packing_floats, int64_t{1} << 20);
  // A 1x1x1 convolution reads x in place.
  EXPECT_EQ(ops::conv3d_scratch(shape(1, 96, 4, 480, 832, 96, 1, 1, 1), 16).column_floats, 0);
}

TEST(Conv3d, RefusesBadShapes) {
  ThreadPool pool(2);
  std::vector<float> buf(1024, 1.0f);
  auto fails = [&](Conv3dShape s) {
    return !ops::conv3d(buf.data(), s, buf.data(), nullptr, buf.data() + 512, pool).ok();
  };
  EXPECT_TRUE(fails(shape(1, 1, 2, 2, 2, 1, 3, 1, 1)));  // kernel longer than the frames
  EXPECT_TRUE(fails(shape(1, 1, 2, 2, 2, 1, 1, 3, 1)));  // taller than the frame
  EXPECT_TRUE(fails(shape(1, 0, 2, 2, 2, 1, 1, 1, 1)));  // no input channels
  EXPECT_TRUE(fails(shape(1, 1, 2, 2, 2, 1, 1, 1, 0)));  // empty kernel
  Conv3dShape s = shape(1, 1, 2, 2, 2, 1, 1, 1, 1);
  s.stride_h = 0;
  EXPECT_TRUE(fails(s));
  s = shape(1, 1, 2, 2, 2, 1, 1, 1, 1);
  s.pad_left = -1;
  EXPECT_TRUE(fails(s));
  s = shape(1, 1, 1, 2, 2, 1, 3, 1, 1);
  s.pad_front = 2;  // causal padding makes a 3-tap kernel fit one frame
  EXPECT_FALSE(fails(s));
  const Status st = ops::conv3d(buf.data(), shape(1, 1, 2, 2, 2, 1, 3, 1, 1), buf.data(), nullptr,
                                buf.data() + 512, pool);
  EXPECT_NE(st.message().find("weight [1, 1, 3, 1, 1]"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace qs
