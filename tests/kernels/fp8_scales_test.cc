// The FP8 W8A8 scale handling of the CUDA backend (kernels/cuda/fp8_scales.h), on the CPU:
// checkpoint weight scales (per tensor, per channel) through formats' fp8 layout into the
// GEMM's form, which must reproduce formats::dequantize exactly; the host reference of the
// product against the dequantized weights; and the per-token activation quantization against a
// plain transcription of vLLM's kernel (saturation, zero rows, the scale's floor, NaN).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "formats/layouts.h"
#include "formats/rtn.h"
#include "kernels/cuda/fp8_scales.h"

namespace qs::kernels::cuda {
namespace {

using formats::QuantizedWeight;

std::vector<float> random_weights(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = normal(rng);
  return w;
}

// An fp8 weight with one scale for the whole tensor (amax / 448), as AutoFP8 stores it; formats
// repeats that scale on every row.
QuantizedWeight per_tensor_weight(const std::vector<float>& src, int64_t n, int64_t k,
                                  DType scale_dtype) {
  float amax = 0.0f;
  for (float v : src) amax = std::max(amax, std::fabs(v));
  float s = amax / kE4m3Max;
  if (scale_dtype == DType::kBF16) s = bf16_to_f32(f32_to_bf16(s));
  QuantizedWeight w;
  w.n = n;
  w.k = k;
  w.bits = 8;
  w.code_type = formats::CodeType::kFp8E4m3;
  w.group_size = k;
  w.scale_dtype = scale_dtype;
  w.scales.assign(static_cast<size_t>(n), s);
  w.zeros.assign(static_cast<size_t>(n), 0);
  w.codes.resize(src.size());
  for (size_t i = 0; i < src.size(); ++i) w.codes[i] = f32_to_fp8_e4m3(src[i] / s);
  return w;
}

// Per channel, as llm-compressor's FP8 / FP8_DYNAMIC presets store it ([n, 1] scales).
QuantizedWeight per_channel_weight(const std::vector<float>& src, int64_t n, int64_t k,
                                   DType scale_dtype) {
  QuantizedWeight w = formats::fp8_quantize(src.data(), n, k, 0);
  if (scale_dtype == DType::kBF16) {
    // Scales a bf16 checkpoint can hold, and codes made with them.
    for (float& s : w.scales) s = bf16_to_f32(f32_to_bf16(s));
    for (int64_t i = 0; i < n * k; ++i) {
      w.codes[static_cast<size_t>(i)] =
          f32_to_fp8_e4m3(src[static_cast<size_t>(i)] / w.scales[i / k]);
    }
  }
  w.scale_dtype = scale_dtype;
  return w;
}

struct CheckpointCase {
  bool per_channel;
  DType scale_dtype;
};

class Fp8Checkpoint : public ::testing::TestWithParam<CheckpointCase> {};

TEST_P(Fp8Checkpoint, GemmScalesReproduceFormatsDequantize) {
  const CheckpointCase& c = GetParam();
  const int64_t n = 48, k = 160;
  const std::vector<float> src = random_weights(n, k, c.per_channel ? 11u : 12u);
  const QuantizedWeight made = c.per_channel ? per_channel_weight(src, n, k, c.scale_dtype)
                                             : per_tensor_weight(src, n, k, c.scale_dtype);
  // Through the checkpoint layout: weight f8_e4m3 [n, k], weight_scale [] or [n, 1].
  const formats::QuantScheme scheme{
      .layout = formats::Layout::kFp8, .bits = 8, .group_size = c.per_channel ? -1 : 0};
  Result<formats::StoredTensors> stored = formats::layout_def(scheme.layout).pack(scheme, made);
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(stored->at("weight_scale").numel(), c.per_channel ? n : 1);
  Result<QuantizedWeight> w = formats::unpack("model.layers.0.mlp.up_proj", scheme, *stored, n, k);
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_EQ(w->n_groups(), 1);

  const Fp8WeightScales ws = fp8_weight_scales(w->scales.data(), n);
  EXPECT_EQ(ws.per_channel, c.per_channel);
  ASSERT_EQ(static_cast<int64_t>(ws.values.size()), c.per_channel ? n : 1);

  std::vector<float> want(static_cast<size_t>(n * k));
  formats::dequantize(*w, want.data());
  for (int64_t j = 0; j < n; ++j) {
    const float s = ws.values[static_cast<size_t>(ws.per_channel ? j : 0)];
    for (int64_t col = 0; col < k; ++col) {
      const size_t i = static_cast<size_t>(j * k + col);
      ASSERT_EQ(s * fp8_e4m3_to_f32(w->codes[i]), want[i]) << "row " << j << ", column " << col;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TensorAndChannel, Fp8Checkpoint,
                         ::testing::Values(CheckpointCase{false, DType::kF32},
                                           CheckpointCase{false, DType::kBF16},
                                           CheckpointCase{true, DType::kF32},
                                           CheckpointCase{true, DType::kBF16}),
                         [](const ::testing::TestParamInfo<CheckpointCase>& p) {
                           return std::string(p.param.per_channel ? "channel_" : "tensor_") +
                                  dtype_name(p.param.scale_dtype);
                         });

// A per-channel table whose rows all hold one value is a tensor scale to the GEMM.
TEST(Fp8WeightScales, EqualRowsBecomeOneScale) {
  const std::vector<float> same(7, 0.125f);
  const Fp8WeightScales s = fp8_weight_scales(same.data(), 7);
  EXPECT_FALSE(s.per_channel);
  EXPECT_EQ(s.values, std::vector<float>{0.125f});
  std::vector<float> differ = same;
  differ[6] = 0.25f;
  const Fp8WeightScales d = fp8_weight_scales(differ.data(), 7);
  EXPECT_TRUE(d.per_channel);
  EXPECT_EQ(d.values, differ);
}

std::vector<uint16_t> bf16_rows(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
  return b;
}

// vLLM's dynamic_per_token_scaled_fp8_quant, transcribed: amax over the row, the scale with its
// floor, then each value times the reciprocal, clamped to +-448 and rounded to e4m3.
void plain_token_quant(const std::vector<uint16_t>& x, int64_t m, int64_t k,
                       std::vector<uint8_t>* q, std::vector<float>* scales) {
  q->resize(x.size());
  scales->resize(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < k; ++c) {
      const float v = bf16_to_f32(x[static_cast<size_t>(r * k + c)]);
      if (std::fabs(v) > amax) amax = std::fabs(v);
    }
    const float s = std::max(amax / 448.0f, 1.0f / (448.0f * 512.0f));
    (*scales)[static_cast<size_t>(r)] = s;
    const float inv = 1.0f / s;
    for (int64_t c = 0; c < k; ++c) {
      const float v = bf16_to_f32(x[static_cast<size_t>(r * k + c)]) * inv;
      (*q)[static_cast<size_t>(r * k + c)] =
          std::isnan(v) ? uint8_t{0x7f} : f32_to_fp8_e4m3(std::clamp(v, -448.0f, 448.0f));
    }
  }
}

TEST(Fp8QuantizeRows, DynamicPerTokenMatchesVllm) {
  const int64_t m = 6, k = 257;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = normal(rng);
  for (int64_t c = 0; c < k; ++c) {
    x[static_cast<size_t>(1 * k + c)] = 0.0f;    // a zero row
    x[static_cast<size_t>(2 * k + c)] *= 1e-5f;  // below the scale's floor
    x[static_cast<size_t>(3 * k + c)] *= 3e4f;   // large values
  }
  x[static_cast<size_t>(4 * k + 17)] = std::nanf("");  // NaN: not an amax, stays NaN
  x[static_cast<size_t>(5 * k + 3)] = -1e30f;          // one outlier sets the scale
  const std::vector<uint16_t> xb = bf16_rows(x);

  std::vector<uint8_t> q(x.size()), want_q;
  std::vector<float> scales(static_cast<size_t>(m)), want_s;
  fp8_quantize_rows_ref(xb.data(), m, k, nullptr, q.data(), scales.data());
  plain_token_quant(xb, m, k, &want_q, &want_s);
  EXPECT_EQ(scales, want_s);
  EXPECT_EQ(q, want_q);

  EXPECT_EQ(scales[1], 1.0f / (448.0f * 512.0f));
  for (int64_t c = 0; c < k; ++c) EXPECT_EQ(q[static_cast<size_t>(1 * k + c)] & 0x7f, 0);
  EXPECT_EQ(scales[2], 1.0f / (448.0f * 512.0f));  // amax ~4e-5 < 448 / (448 * 512)
  EXPECT_EQ(q[static_cast<size_t>(4 * k + 17)], 0x7f);
  for (int64_t r = 0; r < m; ++r) {
    float top = 0.0f;
    for (int64_t c = 0; c < k; ++c) {
      const size_t i = static_cast<size_t>(r * k + c);
      const float back = fp8_e4m3_to_f32(q[i]);
      if (std::isnan(back)) continue;
      top = std::max(top, std::fabs(back));
      // e4m3 keeps 3 mantissa bits: within 2^-4 relative, or half a subnormal step (2^-10).
      const float v = bf16_to_f32(xb[i]);
      EXPECT_LE(std::fabs(back * scales[static_cast<size_t>(r)] - v),
                std::fabs(v) / 16 + scales[static_cast<size_t>(r)] / 1024)
          << "row " << r << ", column " << c;
    }
    // The row's largest value lands on e4m3's largest, unless the floor held the scale up.
    if (r != 1 && r != 2) {
      EXPECT_EQ(top, 448.0f) << "row " << r;
    }
  }
}

TEST(Fp8QuantizeRows, StaticScaleSaturates) {
  const int64_t m = 2, k = 5;
  const std::vector<float> x = {1.0f, -1.0f, 500.0f, -1e6f, 0.5f, 0.0f, 2.0f, 3.0f, -4.0f, 1e-3f};
  const std::vector<uint16_t> xb = bf16_rows(x);
  const float input_scale = 0.5f;  // x / 0.5 passes 448 for 500 and -1e6
  std::vector<uint8_t> q(x.size());
  std::vector<float> scales(static_cast<size_t>(m));
  fp8_quantize_rows_ref(xb.data(), m, k, &input_scale, q.data(), scales.data());
  EXPECT_EQ(scales, std::vector<float>(2, 0.5f));
  EXPECT_EQ(q[2], 0x7e);  // +448
  EXPECT_EQ(q[3], 0xfe);  // -448
  EXPECT_EQ(fp8_e4m3_to_f32(q[0]), 2.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(q[1]), -2.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(q[8]), -8.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(q[9]), 0.001953125f);  // 2e-3 rounds to the subnormal 2^-9
}

// The reference product equals the plain one on dequantized operands: activations
// s_x * e4m3(q) against formats::dequantize's weights, for tensor and channel weight scales.
TEST(Fp8GemmRef, EqualsTheProductOfDequantizedOperands) {
  const int64_t m = 5, n = 24, k = 96;
  const std::vector<float> src = random_weights(n, k, 21u);
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = normal(rng);
  const std::vector<uint16_t> xb = bf16_rows(x);
  std::vector<uint8_t> qx(x.size());
  std::vector<float> sx(static_cast<size_t>(m));
  fp8_quantize_rows_ref(xb.data(), m, k, nullptr, qx.data(), sx.data());

  for (bool per_channel : {false, true}) {
    const QuantizedWeight w = per_channel ? per_channel_weight(src, n, k, DType::kF32)
                                          : per_tensor_weight(src, n, k, DType::kF32);
    std::vector<float> wd(static_cast<size_t>(n * k));
    formats::dequantize(w, wd.data());
    const Fp8WeightScales ws = fp8_weight_scales(w.scales.data(), n);
    ASSERT_EQ(ws.per_channel, per_channel);
    std::vector<float> y(static_cast<size_t>(m * n)), mag(y.size());
    fp8_gemm_ref(qx.data(), sx.data(), true, w.codes.data(), ws, m, n, k, y.data(), mag.data());
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0.0, bound = 0.0;
        for (int64_t c = 0; c < k; ++c) {
          const double a = static_cast<double>(sx[static_cast<size_t>(r)]) *
                           fp8_e4m3_to_f32(qx[static_cast<size_t>(r * k + c)]);
          want += a * wd[static_cast<size_t>(j * k + c)];
          bound += std::fabs(a * wd[static_cast<size_t>(j * k + c)]);
        }
        const size_t i = static_cast<size_t>(r * n + j);
        EXPECT_NEAR(mag[i], bound, 1e-6 * bound);
        EXPECT_NEAR(y[i], want, 1e-6 * bound + 1e-30) << per_channel << " " << r << ", " << j;
      }
    }
  }
}

}  // namespace
}  // namespace qs::kernels::cuda
