// AutoRound RTN (formats/rtn.h) against hand-computed groups: asymmetric min/max with
// round-half-even, full-range symmetric with its sign rule, the scale floor, partial groups,
// and f16 scales.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "formats/rtn.h"

namespace qs::formats {
namespace {

float f16(float v) {
  return f16_to_f32(f32_to_f16(v));
}

TEST(FormatsRtn, AsymHandExample) {
  // wmin = -1, wmax = 2, 2 bits: scale 3/3 = 1, zero round(1/1) = 1; 0.5 rounds half to even.
  const std::vector<float> w = {-1.0f, 0.0f, 0.5f, 2.0f};
  const QuantizedWeight q = rtn_quantize(w.data(), 1, 4, 2, -1, false);
  EXPECT_EQ(q.group_size, 4);
  EXPECT_EQ(q.scales, std::vector<float>{1.0f});
  EXPECT_EQ(q.zeros, std::vector<int32_t>{1});
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0, 1, 1, 3}));
  EXPECT_EQ(q.scale_dtype, DType::kF16);
  EXPECT_TRUE(q.g_idx.empty());
}

TEST(FormatsRtn, SymLargerNegativeGivesPositiveScale) {
  // |wmin| = 0.8 > wmax = 0.7: scale = f16(0.8 / 8) > 0, and -0.8 maps to q = -8 (u = 0).
  const std::vector<float> w = {-0.8f, 0.1f, 0.4f, 0.7f};
  const QuantizedWeight q = rtn_quantize(w.data(), 1, 4, 4, -1, true);
  EXPECT_EQ(q.scales, std::vector<float>{f16(0.1f)});
  EXPECT_EQ(q.zeros, std::vector<int32_t>{8});
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0, 9, 12, 15}));
}

TEST(FormatsRtn, SymLargerPositiveGivesNegativeScale) {
  // wmax = 0.8 >= |wmin|: scale = -f16(0.8 / 8); 0.8 maps to q = -8, -0.7 to q = 7.
  const std::vector<float> w = {0.8f, -0.1f, -0.7f, 0.0f};
  const QuantizedWeight q = rtn_quantize(w.data(), 1, 4, 4, -1, true);
  EXPECT_EQ(q.scales, std::vector<float>{-f16(0.1f)});
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0, 9, 15, 8}));
  // A tie (|wmin| == wmax) takes the negative scale too, as upstream.
  const std::vector<float> tie = {0.5f, -0.5f};
  EXPECT_LT(rtn_quantize(tie.data(), 1, 2, 4, -1, true).scales[0], 0.0f);
}

TEST(FormatsRtn, ZeroGroupUsesTheScaleFloor) {
  const std::vector<float> w(8, 0.0f);
  const QuantizedWeight sym = rtn_quantize(w.data(), 1, 8, 4, -1, true);
  EXPECT_EQ(sym.scales[0], f16(1e-5f));
  EXPECT_EQ(sym.codes, std::vector<uint8_t>(8, 8));
  const QuantizedWeight asym = rtn_quantize(w.data(), 1, 8, 4, -1, false);
  EXPECT_EQ(asym.scales[0], f16(1e-5f));
  EXPECT_EQ(asym.zeros[0], 0);
  EXPECT_EQ(asym.codes, std::vector<uint8_t>(8, 0));
}

TEST(FormatsRtn, PartialLastGroupUsesOnlyItsColumns) {
  // k = 160 in groups of 128: group 1 holds columns 128..159 only.
  std::vector<float> w(160, 0.01f);
  w[0] = -0.08f;  // group 0: |wmin| wins, scale 0.01
  w[150] = 1.6f;  // group 1: wmax wins, scale -0.2
  const QuantizedWeight q = rtn_quantize(w.data(), 1, 160, 4, 128, true);
  ASSERT_EQ(q.n_groups(), 2);
  EXPECT_EQ(q.scales[0], f16(0.01f));
  EXPECT_EQ(q.scales[1], -f16(0.2f));
  EXPECT_EQ(q.codes[150], 0);
}

TEST(FormatsRtn, PerTensorSharesOneScale) {
  // group_size 0: the range of the whole tensor, repeated on every row.
  const std::vector<float> w = {0.1f, -0.2f, 0.05f, 0.4f, 0.0f, -0.3f};
  const QuantizedWeight q = rtn_quantize(w.data(), 2, 3, 8, 0, false);
  EXPECT_EQ(q.group_size, 3);
  const float scale = f16(0.7f / 255);
  EXPECT_EQ(q.scales, (std::vector<float>{scale, scale}));
  const int32_t zero = static_cast<int32_t>(std::nearbyint(0.3f / scale));
  EXPECT_EQ(q.zeros, (std::vector<int32_t>{zero, zero}));
  EXPECT_EQ(q.codes[5], 0);  // the tensor minimum
}

// On random weights: scales are f16 values, zeros in range, and every value dequantizes within
// one scale step (half a step unless clamped at the top code).
TEST(FormatsRtn, RandomWeightsStayWithinOneStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t n = 16, k = 200;
  std::vector<float> w(n * k);
  for (float& v : w) v = normal(rng);
  for (int bits : {2, 3, 4, 8}) {
    for (bool sym : {true, false}) {
      const QuantizedWeight q = rtn_quantize(w.data(), n, k, bits, 64, sym);
      ASSERT_TRUE(q.validate().ok()) << q.validate().message();
      int negative = 0;
      for (size_t i = 0; i < q.scales.size(); ++i) {
        EXPECT_EQ(q.scales[i], f16(q.scales[i]));
        EXPECT_LE(q.zeros[i], (1 << bits) - 1);
        if (sym) {
          EXPECT_EQ(q.zeros[i], 1 << (bits - 1));
        }
        negative += q.scales[i] < 0;
      }
      // Full-range sym picks the sign per group; asym scales are never negative.
      if (sym) {
        EXPECT_GT(negative, 0);
      } else {
        EXPECT_EQ(negative, 0);
      }
      std::vector<float> deq(w.size());
      dequantize(q, deq.data());
      for (int64_t i = 0; i < n * k; ++i) {
        const float s = std::abs(q.scales[(i / k) * q.n_groups() + (i % k) / 64]);
        ASSERT_LE(std::abs(deq[i] - w[i]), s * 1.001f) << bits << " bits, sym " << sym;
      }
    }
  }
}

}  // namespace
}  // namespace qs::formats
