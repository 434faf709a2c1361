// kernels/cuda: the scales of an FP8 W8A8 linear as the FP8 GEMM (fp8_gemm.h) applies them,
// and the host references of what the GPU does with them. Host code, built with or without
// CUDA. A checkpoint's weight scale (formats/fp8.cc unpacks every form into a per-row table
// [n, groups]) becomes one scale for the tensor or one per output channel; the activation's
// scale is the checkpoint's static input_scale, or one per token computed from x at run time
// as vLLM's dynamic_per_token_scaled_fp8_quant does (vllm-serving.md §2.4):
//   s = max(amax(row) / 448, 1 / (448 * 512)),  q = e4m3(x * (1 / s))
// with 448 the largest finite e4m3fn value, the floor keeping an all-zero row's scale finite,
// the multiplication by the reciprocal as vLLM's kernels do it, and e4m3 rounding to nearest
// even, saturating to +-448 (what __NV_SATFINITE gives; core's f32_to_fp8_e4m3).
// y[r, j] = s_x[r] * s_w[j] * sum_c e4m3(qx[r, c]) * e4m3(qw[j, c]).
// Block-scaled weights (DeepSeek's 128 x 128, groups > 1 in formats' table) are not among
// them: ops dequantizes those.
#pragma once

#include <cstdint>
#include <vector>

namespace qs::kernels::cuda {

constexpr float kE4m3Max = 448.0f;
constexpr float kFp8MinTokenScale = 1.0f / (448.0f * 512.0f);

struct Fp8WeightScales {
  bool per_channel = false;   // false: values[0] scales the whole tensor
  std::vector<float> values;  // [1] or [n]
};

// From formats' per-row scale table of an fp8 weight with one group per row ([n, 1]): one scale
// when every row has the same (a tensor scale, which formats repeats on every row), else one per
// row. Per-tensor scales go to cuBLASLt's scale pointer; per-channel ones to the epilogue.
Fp8WeightScales fp8_weight_scales(const float* row_scales, int64_t n);

// The dynamic scale of one token whose largest |x| is `amax`.
float fp8_token_scale(float amax);

// Host reference of fp8_quantize_rows (fp8_gemm.h): x [m, k] bf16 bits to e4m3 codes q [m, k]
// and row_scales [m]. static_scale null: dynamic per-token scales; else every row uses
// *static_scale (the checkpoint's input_scale) and row_scales gets it m times.
void fp8_quantize_rows_ref(const uint16_t* x, int64_t m, int64_t k, const float* static_scale,
                           uint8_t* q, float* row_scales);

// Host reference of the FP8 GEMM's result: y[r, j] = sx * sw * sum_c e4m3(qx[r, c]) *
// e4m3(qw[j, c]), summed in double and rounded to f32 once; sx = x_scales[r] when
// x_per_token, else x_scales[0]. abs_sum (optional, [m, n]) receives sx * sw * sum |products|,
// the scale a tolerance on the GPU's f32 accumulation is relative to.
void fp8_gemm_ref(const uint8_t* qx, const float* x_scales, bool x_per_token, const uint8_t* qw,
                  const Fp8WeightScales& w, int64_t m, int64_t n, int64_t k, float* y,
                  float* abs_sum);

}  // namespace qs::kernels::cuda
