// kernels/cpu: SIMD quantized linear kernels over the resident layout of kernels/qmatrix.h.
// Written once in Highway for every target (qlinear_{quantize,gemv,gemm}_hwy.cc), and a
// hand-written AVX-512 GEMV; ops/linear.cc picks one set per ISA and a kernel per
// call: the GEMV streams each column's codes once for all m rows (decode, small batches), the
// GEMM unpacks a panel of columns and reuses it over many rows (prefill). Both write
// y[:, n_begin:n_end] (+ bias), no allocation.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/qmatrix.h"

namespace qs::kernels::cpu {

struct QLinearArgs {
  const QMatrixView* w;
  const QActsView* a;
  const float* bias;  // [n] or nullptr
  float* y;           // [m, n]
};

// From this many rows the GEMM is used (measured, see docs/kernels.md).
constexpr int64_t kQGemmMinRows = 16;
// From this many rows the AMX GEMM replaces the AVX-512 one where AMX is active.
constexpr int64_t kQAmxMinRows = 16;

#if QS_X86  // AVX2, AVX-512 and AMX kernels (CMakeLists.txt)
void qlinear_gemv_avx512(const QLinearArgs& args, int64_t n_begin, int64_t n_end);
// AMX tiles (kernels::amx_active()); the GEMM contract above, for m >= kQAmxMinRows.
void qlinear_gemm_amx(const QLinearArgs& args, int64_t n_begin, int64_t n_end);
#endif

// The Highway kernels, compiled for every target of elementwise_cpu.h's
// elementwise_hwy_targets(): the GEMV and GEMM with the contract above, and quantize_acts bit
// for bit the scalar one.
struct QLinearKernels {
  void (*gemv)(const QLinearArgs& args, int64_t n_begin, int64_t n_end);
  void (*gemm)(const QLinearArgs& args, int64_t n_begin, int64_t n_end);
  QActsView (*quantize_acts)(const QMatrixView& w, const float* x, int64_t m, void* buf);
};
// The kernels compiled for `target` (a Highway target bit); the caller checks that the CPU
// has it. ops::linear runs the one elementwise_hwy_target(isa) names, but on x86 for the
// GEMV, where the hand-written ones above measured faster (docs/kernels.md, "Quantized
// linear kernels").
const QLinearKernels& qlinear_hwy(int64_t target);
// The GEMV and GEMM of qlinear_hwy(target), from their own sources (qlinear_gemv_hwy.cc,
// qlinear_gemm_hwy.cc), which compile in parallel; qlinear_hwy() (qlinear_quantize_hwy.cc,
// beside quantize_acts) assembles the three.
decltype(QLinearKernels::gemv) qlinear_gemv_hwy(int64_t target);
decltype(QLinearKernels::gemm) qlinear_gemm_hwy(int64_t target);

}  // namespace qs::kernels::cpu
