// kernels/cpu: SIMD GEMMs C[m, n] (+)= A[m, k] * B[k, n] (kernels/gemm_args.h).
// - f32: one Highway source for every target (gemm_hwy.cc), blocked for every cache level
//   (GotoBLAS/BLIS): B packed into panels of two vectors of columns per 256-deep k slice, A per
//   192-row block, both through their strides, so any operand layout runs at the same speed;
//   register tiles of 12 (AVX-512) or 6 rows x two vectors. It needs the caller's scratch,
//   gemm_f32_hwy_scratch_floats(g) floats per thread.
// Trusts its arguments like every kernel.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/gemm_args.h"

namespace qs::kernels::cpu {

// Rows handed to one thread should be multiples of this (both register tile heights divide it).
constexpr int64_t kGemmRowGrain = 12;

// The f32 kernel compiled for each target of elementwise_cpu.h's elementwise_hwy_targets();
// ops::gemm runs the one elementwise_hwy_target(isa) names. The scratch fits every target.
using GemmF32Kernel = void (*)(const GemmArgs& g, int64_t i_begin, int64_t i_end, float* scratch);
int64_t gemm_f32_hwy_scratch_floats(const GemmArgs& g);
// The kernel compiled for `target` (a Highway target bit); the caller checks the CPU has it.
GemmF32Kernel gemm_f32_hwy(int64_t target);

#if QS_X86
// bf16 products (gemm_bf16_avx512.cc): C (+)= bf16(A) * bf16(B), f32 accumulation, through
// vdpbf16ps; reads both operands through both strides. Needs gemm_bf16_avx512_supported()
// (AVX512-BF16) and the caller's scratch, gemm_bf16_avx512_scratch_dwords(g) per thread.
bool gemm_bf16_avx512_supported();
int64_t gemm_bf16_avx512_scratch_dwords(const GemmArgs& g);
void gemm_bf16_avx512(const GemmArgs& g, int64_t i_begin, int64_t i_end, uint32_t* scratch);
#endif

}  // namespace qs::kernels::cpu
