// kernels/cpu: SIMD quantized linear kernels over the resident layout of kernels/qmatrix.h.
// One file per ISA; ops/quant_matrix.cc picks one per call: the GEMV streams each column's
// codes once for all m rows (decode, small batches), the GEMM unpacks a panel of columns and
// reuses it over many rows (prefill). Both write y[:, n_begin:n_end] (+ bias), no allocation.
#pragma once

#include <cstdint>

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

void qlinear_gemv_avx512(const QLinearArgs& args, int64_t n_begin, int64_t n_end);
void qlinear_gemm_avx512(const QLinearArgs& args, int64_t n_begin, int64_t n_end);
// AMX tiles (kernels::amx_active()); same contract as the GEMMs above, for m >= kQAmxMinRows.
void qlinear_gemm_amx(const QLinearArgs& args, int64_t n_begin, int64_t n_end);
void qlinear_gemv_avx2(const QLinearArgs& args, int64_t n_begin, int64_t n_end);
void qlinear_gemm_avx2(const QLinearArgs& args, int64_t n_begin, int64_t n_end);

// quantize_acts with SIMD, bit-identical to the scalar one.
QActsView quantize_acts_avx512(const QMatrixView& w, const float* x, int64_t m, void* buf);
QActsView quantize_acts_avx2(const QMatrixView& w, const float* x, int64_t m, void* buf);

}  // namespace qs::kernels::cpu
