// kernels/cpu: SIMD linear kernels, y[m, n] = x[m, k] @ w[n, k]^T (+ bias), f32 compute.
// The GEMV and GEMM are one Highway source for every target (linear_hwy.cc); beside them the
// AMX bf16 GEMM (linear_amx.cc) and the AVX-512 pair-panel kernels (linear_panels*.cc).
// ops/linear.cc picks the kernel once per call and splits [0, n) over threads. Like every
// kernel, these trust their arguments: no validation, no heap allocation.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"

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

// Below these many rows of x the weights are streamed once through a GEMV; from them on
// they are converted to f32 panels and multiplied by a register-tiled GEMM. Measured on the
// Qwen2.5-0.5B matmuls (docs/kernels.md): the AVX-512 GEMV still beat the GEMM at m = 64,
// the AVX2 GEMV won at m = 32 and lost at 64 (the hand-written kernels, which the Highway
// ones match: same blocking, same speed within noise).
constexpr int64_t kGemmMinRowsAvx512 = 65;
constexpr int64_t kGemmMinRowsAvx2 = 48;

// Column blocks handed to one thread should be multiples of this, so that GEMM panels are
// never split between threads (a split would still be correct, only slower).
constexpr int64_t kColumnGrain = 32;

// The GEMV (decode-sized m) and the panel GEMM (prefill) written once (linear_hwy.cc) and
// compiled for each target of elementwise_cpu.h's elementwise_hwy_targets(), with the GEMM on
// pair panels (below); ops::linear runs the target that elementwise_hwy_target(isa) names.
// Each computes y[:, n_begin:n_end] for any m and any column range; gemv and gemm differ only
// in speed (gemv below kGemmMinRows*, gemm from it on).
using LinearKernel = void (*)(const LinearArgs& a, int64_t n_begin, int64_t n_end);
struct LinearKernels {
  LinearKernel gemv;
  LinearKernel gemm;
  LinearKernel gemm_pairs;  // gemm with a.w pair panels; n_begin a multiple of kPanelCols
};
// The kernels compiled for `target` (a Highway target bit); the caller checks the CPU has it.
// Safe to call from any thread.
const LinearKernels& linear_hwy(int64_t target);

// AMX bf16 tiles (kernels::amx_active()) for bf16 weights with k a multiple of 32
// (linear_amx_bf16_supports): x runs as three bf16 terms that sum to it exactly, so results
// differ from the f32 kernels only by summation order. Any m.
#if QS_X86  // AMX and AVX-512 kernels (CMakeLists.txt); the constants are read everywhere
bool linear_amx_bf16_supports(const LinearArgs& a);
#endif
// The ops use it from this many output columns (the 128-column k/v projection of
// Qwen2.5-0.5B ran 0.6x the AVX-512 GEMM, the 896-column q/o 1.5x).
constexpr int64_t kAmxBf16MinCols = 256;
// ... and from this many rows of x (batched decode): the GEMV (f32 FMAs on widened weights,
// 4 rows of x at a time) is compute-bound there, and the tiles ran the Qwen2.5-0.5B matmuls
// and lm_head 1.4x as fast at m = 8 and 1.8-2.4x at m = 16; at m = 2-4 the two were level
// or the GEMV ahead (bench/linear_bench small_m, docs/kernels.md).
constexpr int64_t kAmxBf16MinRows = 8;
#if QS_X86
void linear_gemm_amx_bf16(const LinearArgs& a, int64_t n_begin, int64_t n_end);
#endif

// ---- Pair panels: bf16 weights repacked once at load for batched decode -------------------
// The row-major GEMV re-reads all of x for every 4 weight rows and widens every weight once
// per 4 rows of x, so at 8-64 rows it runs at about half the FMA peak; the GEMM would read x
// once per 32 columns but transposes its f32 panels on every call. A resident panel layout
// pays the transpose once: 32 output columns per panel, k steps of 64 bytes, and in step kk
// dword d holds column 32p + d in its low half and column 32p + 16 + d in its high half, so
// that a shift and a mask (no shuffle) widen a step to the two f32 vectors of its columns.
// Columns past n are zero. The kernel broadcasts x and accumulates each (row, column) over k
// in order, so a row's result does not depend on how many rows share its call.
constexpr int64_t kPanelCols = 32;
// uint16 elements of the packed form of an [n, k] matrix.
int64_t pair_panel_elems(int64_t n, int64_t k);
// Packs row-major bf16 w [n, k] into `out` (pair_panel_elems(n, k) elements, 64-byte
// aligned).
void pack_bf16_pair_panels(const uint16_t* w, int64_t n, int64_t k, uint16_t* out);
// y[:, n_begin:n_end] for any m and any column range (one that starts or ends inside a panel
// computes that panel whole and stores its share), with a.w the packed panels.
// Prefill-sized m (from kGemmMinRowsAvx512) runs linear_hwy's gemm_pairs instead.
#if QS_X86
void linear_panels_bf16_avx512(const LinearArgs& a, int64_t n_begin, int64_t n_end);
#endif

}  // namespace qs::kernels::cpu
