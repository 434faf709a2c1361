// kernels/cpu: the quantized linear with bf16 activations on AVX512-BF16 (vdpbf16ps), the
// exact-activation path beside the int8 kernels of qlinear_cpu.h; the arithmetic and the
// activation layout are those of ref/qlinear_bf16act_ref.h. Writes y[:, n_begin:n_end]
// (+ bias), no allocation.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/qmatrix.h"
#include "kernels/qpanels.h"
#include "kernels/ref/qlinear_bf16act_ref.h"

#if QS_X86  // the kernels are AVX-512 ones (CMakeLists.txt)
namespace qs::kernels::cpu {

// Whether this CPU runs qlinear_bf16act_avx512 (AVX512F + AVX512-BF16).
bool bf16act_supported();

void qlinear_bf16act_avx512(const QMatrixView& w, const Bf16ActsView& a, const float* bias,
                            int64_t n_begin, int64_t n_end, float* y);

// The same product on resident panels (kernels/qpanels.h), for activations without declared
// scales (a.gscale null): y[:, n_begin:n_end] (+ bias); n_begin a multiple of kPanelCols.
// Needs bf16act_supported().
void qlinear_bf16panels_avx512(const QPanelsView& w, const Bf16ActsView& a, const float* bias,
                               int64_t n_begin, int64_t n_end, float* y);

// prepare_declared_bf16_acts on AVX-512 (needs bf16act_supported()): the same bytes, gsum and
// gscale, bit for bit.
Bf16ActsView prepare_declared_bf16_acts_avx512(const QMatrixView& w, const ActQuant& act,
                                               float static_scale, int32_t static_zero,
                                               const float* x, int64_t m, void* buf);

}  // namespace qs::kernels::cpu
#endif  // QS_X86
