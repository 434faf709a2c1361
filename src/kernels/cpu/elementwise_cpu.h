// kernels/cpu: SIMD versions of the per-token ops, written once through Google Highway
// (elementwise_hwy.cc) and compiled for each of its targets, each with exactly the semantics
// of its kernels/ref/elementwise_ref.h oracle (see ops/elementwise.h). exp() is a polynomial
// good to ~2 ulp; sums run in f32 lanes instead of one scalar chain.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/isa.h"

namespace qs::kernels::cpu {

// One set of the ops, with the signatures of the kernels/ref oracles.
struct ElementwiseKernels {
  void (*rms_norm)(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y);
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);
  void (*rope_rotate_half)(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                           const float* cos, const float* sin);
  void (*softmax)(float* x, int64_t n);
  void (*add_inplace)(float* y, const float* x, int64_t n);
  float (*exp_sub)(const float* x, int64_t n, float shift, float* out);
  // x = x / 2 (1 + erf(x / sqrt 2)) with a rational erf within 4.2e-7 of the exact one.
  void (*gelu_erf)(float* x, int64_t n);
};

// A target is Highway's bit for it (HWY_AVX3_DL, HWY_AVX3, HWY_AVX2, ...).
// The targets elementwise_hwy.cc is compiled for, best first.
std::vector<int64_t> elementwise_hwy_targets();
const char* hwy_target_name(int64_t target);
bool hwy_target_supported(int64_t target);
// The ops compiled for `target`, one of elementwise_hwy_targets(); the caller checks that the
// CPU has it. Safe to call from any thread.
const ElementwiseKernels& elementwise_hwy(int64_t target);
// The target the ops run for an active ISA (not kRef): for avx512 (and hwy off x86) the best
// this CPU has, as HWY_DYNAMIC_DISPATCH would pick; for avx2 the best of AVX2 and below, so
// that QS_KERNEL=avx2 still runs 256-bit code.
int64_t elementwise_hwy_target(Isa isa);
// elementwise_hwy(elementwise_hwy_target(active_isa())), chosen on the first call; what the ops
// run unless the active ISA is kRef.
const ElementwiseKernels& elementwise_hwy_active();

}  // namespace qs::kernels::cpu
