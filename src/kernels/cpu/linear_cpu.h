// kernels/cpu: SIMD linear kernels, y[m, n] = x[m, k] @ w[n, k]^T (+ bias), f32 compute.
// One file per ISA (linear_avx2.cc, linear_avx512.cc) implements the same two entry points;
// ops/linear.cc picks the ISA once per call and splits [0, n) over threads. Like every
// kernel, these trust their arguments: no validation, no heap allocation.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace qs::kernels::cpu {

// One linear call. Row-major, contiguous:
//   x: [m, k] f32;  w: [n, k] in w_dtype (F32, F16 or BF16);  bias: [n] f32 or nullptr;
//   y: [m, n] f32, written (not accumulated) for the columns a kernel is given.
struct LinearArgs {
  const float* x;
  int64_t m;
  int64_t k;
  const void* w;
  DType w_dtype;
  int64_t n;
  const float* bias;
  float* y;
};

// Below this many rows of x the weights are streamed once through a GEMV; from it on they
// are converted to f32 panels and multiplied by a register-tiled GEMM (see docs/kernels.md).
constexpr int64_t kGemmMinRows = 9;

// Column blocks handed to one thread should be multiples of this, so that GEMM panels are
// never split between threads (a split would still be correct, only slower).
constexpr int64_t kColumnGrain = 32;

// Both compute y[:, n_begin:n_end]. gemv is meant for m < kGemmMinRows (it works for any
// m), gemm for larger m.
void linear_gemv_avx512(const LinearArgs& a, int64_t n_begin, int64_t n_end);
void linear_gemm_avx512(const LinearArgs& a, int64_t n_begin, int64_t n_end);
void linear_gemv_avx2(const LinearArgs& a, int64_t n_begin, int64_t n_end);
void linear_gemm_avx2(const LinearArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace qs::kernels::cpu
