// kernels/cuda: the FP8 W8A8 linear, y[m, n] = (s_x * x_q)[m, k] @ (s_w * W_q)[n, k]^T with
// e4m3 codes on both sides (fp8_scales.h gives the scales' meaning and the host references).
// x is quantized on the GPU first (fp8_quantize_rows: dynamic per-token scales, or the
// checkpoint's static one); the product runs on cuBLASLt's FP8 tensor-core kernels (sm_89 and
// later: Ada, Hopper), f32 accumulation. Per-tensor scales travel as cuBLASLt's A/B scale
// pointers and the result is written in the output type directly; when either scale is a
// vector (per token, per channel) cuBLASLt writes the unscaled f32 product and a small
// epilogue kernel multiplies row and column scales in. Plain C++ header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/device_runtime.h"

namespace qs::kernels::cuda {

// Whether a device of compute capability major.minor has FP8 tensor cores (8.9 and later).
inline bool fp8_gemm_supported(int cc_major, int cc_minor) {
  return cc_major > 8 || (cc_major == 8 && cc_minor >= 9);
}

// x [m, k] bf16 bits -> q [m, k] e4m3 codes and scales [m] (device memory): static_scale null
// gives dynamic per-token scales (fp8_quantize_rows_ref is the host reference, bit for bit);
// else every row uses the device scalar *static_scale, copied into scales. Any sm_80+ GPU.
CudaStatus fp8_quantize_rows(const uint16_t* x, int64_t m, int64_t k, const float* static_scale,
                             uint8_t* q, float* scales, Stream stream);

struct Fp8GemmArgs {
  const uint8_t* qx = nullptr;      // [m, k] e4m3, row-major (device)
  const float* x_scales = nullptr;  // [m] when x_per_token, else [1] (device)
  bool x_per_token = true;
  const uint8_t* qw = nullptr;      // [n, k] e4m3, row-major as the checkpoint stores it (device)
  const float* w_scales = nullptr;  // [n] when w_per_channel, else [1] (device)
  bool w_per_channel = false;
  int64_t m = 0, n = 0, k = 0;  // k and n multiples of 16 (cuBLASLt's FP8 alignment)
  void* y = nullptr;            // [m, n] row-major (device): f32, or bf16 when y_bf16
  bool y_bf16 = true;
  // [m, n] f32 (device) for the unscaled product when a vector scale meets a bf16 y
  // (fp8_gemm_needs_scratch); else unused.
  float* scratch = nullptr;
};

inline bool fp8_gemm_needs_scratch(const Fp8GemmArgs& a) {
  return (a.x_per_token || a.w_per_channel) && a.y_bf16;
}

// Owns a cuBLASLt handle, its workspace and the plans of the shapes seen so far. One per device
// and stream, like CublasLtGemm.
class Fp8Gemm {
 public:
  // On the current device; fails (CUBLAS_STATUS_ARCH_MISMATCH, with the device's compute
  // capability in the message) below sm_89. workspace_bytes as for CublasLtGemm.
  static CudaStatus create(size_t workspace_bytes, std::unique_ptr<Fp8Gemm>* out);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // Enqueues y on `stream`. An unsupported shape (k or n not a multiple of 16, no algorithm
  // from cuBLASLt's heuristic) returns CUBLAS_STATUS_NOT_SUPPORTED and leaves y untouched.
  CudaStatus linear(const Fp8GemmArgs& args, Stream stream);

 private:
  struct Impl;
  explicit Fp8Gemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace qs::kernels::cuda
