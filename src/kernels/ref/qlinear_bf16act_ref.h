// kernels/ref: the quantized linear with bf16 activations (W4A16 as transformers and vLLM run
// it, instead of the int8 activations of qlinear_ref.h): the layout of the rounded
// activations, the one scalar routine that fills it (every ISA uses it, so all see the same
// bf16 values and group sums), and the scalar oracle of the SIMD kernel
// (cpu/qlinear_bf16act.h). Only x is rounded: codes are small integers, exact in bf16, and
// the f32 scale and zero terms are applied per group after the dot products:
//   y[r, j] = sum_g scale[j, g] * sum_{c in g} u[j, c] * xb[r, c] + zero_term[j, g] * gsum[r, g]
// with xb = bf16(x) (round to nearest even) and gsum[r, g] = sum_{c in g} xb[r, c].
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/qmatrix.h"
#include "kernels/qpanels.h"

namespace qs::kernels {

struct Bf16ActsView {
  int64_t m = 0, k_pad = 0, n_groups = 0;
  const uint16_t* x = nullptr;  // [m, k_pad] bf16 bits, inputs permuted by the weight's perm,
                                // zero beyond k
  const float* gsum = nullptr;  // [m, n_groups]
  // W8A8 (prepare_declared_bf16_acts): x[r, c] = gscale[r, g] * bf16 value, for c in weight
  // group g; [m, n_groups]. nullptr: 1.
  const float* gscale = nullptr;
};

// f32 -> bf16 bits, round to nearest even (NaN stays NaN), as vcvtne2ps2bf16.
uint16_t f32_to_bf16(float v);
float bf16_to_f32(uint16_t b);

// Bytes of the buffer prepare_bf16_acts fills for m rows against `w` (64-byte aligned parts).
size_t bf16_acts_bytes(const QMatrixView& w, int64_t m);
// Rounds x [m, k] f32 for `w` into `buf` (bf16_acts_bytes(w, m) bytes, 64-byte aligned).
Bf16ActsView prepare_bf16_acts(const QMatrixView& w, const float* x, int64_t m, void* buf);

// W8A8 on the bf16-activation kernels: x rounded to the grid the checkpoint declares
// (ActQuant): e4m3 values of x / s for fp8, q - zero for int8 (integers within
// +-255), both exact in bf16, so the products are those of an fp8 tensor core or an int8
// GEMM; the scales go to gscale. Dynamic scales follow vLLM's kernels: fp8 s = max(amax / 448,
// 1 / (448 * 512)), int8 s = amax / 127, asymmetric int8 s = (max - min) / 255 with zero
// round(-128 - min / s); static ones are `static_scale` / `static_zero`. Where the activation
// groups do not line up with the weight's groups (per-group activations on a per-channel
// weight, or act-order) each value is stored as bf16(s * value) instead: one more rounding,
// of 2^-9 relative.
size_t declared_bf16_acts_bytes(const QMatrixView& w, int64_t m);
Bf16ActsView prepare_declared_bf16_acts(const QMatrixView& w, const ActQuant& act,
                                        float static_scale, int32_t static_zero, const float* x,
                                        int64_t m, void* buf);

// The parts of prepare_declared_bf16_acts that its SIMD twins
// (cpu::prepare_declared_bf16_acts_avx512) share, so that every ISA lays out, scales and sums
// alike. The buffer's parts (declared_bf16_acts_bytes):
struct DeclaredActsBuffers {
  uint16_t* x = nullptr;  // [m, k_pad]
  float* gsum = nullptr;  // [m, n_groups]
  float* gscale = nullptr;
};
DeclaredActsBuffers declared_bf16_acts_buffers(const QMatrixView& w, int64_t m, void* buf);
// Inputs per activation scale, in x's own order.
int64_t declared_act_span(const QMatrixView& w, const ActQuant& act);
// Whether each weight group sees one activation scale (it then goes to gscale; otherwise
// bf16(s * value) is stored).
bool declared_acts_aligned(const QMatrixView& w, const ActQuant& act);
// A dynamic scale (and asymmetric int8 zero) from the span's min, max and max |x| (each
// starting at 0), as vLLM's kernels compute it.
void declared_act_scale(const ActQuant& act, float lo, float hi, float amax, float* s, int32_t* z);
// gsum[g] for one row of bf16 activations, summed in input order.
void declared_bf16_group_sums(const QMatrixView& w, const uint16_t* row, float* gsum);

namespace ref {
// y[i, j] (+ bias[j] when not null) for j in [n_begin, n_end).
void qlinear_bf16act(const QMatrixView& w, const Bf16ActsView& a, const float* bias,
                     int64_t n_begin, int64_t n_end, float* y);
// The same on resident panels (kernels/qpanels.h), whose weights keep no per-column codes:
// what runs them where the AVX512-BF16 kernel cannot (QS_KERNEL=ref, tests naming an ISA).
// Activations without declared scales (a.gscale null).
void qlinear_bf16panels(const QPanelsView& w, const Bf16ActsView& a, const float* bias,
                        int64_t n_begin, int64_t n_end, float* y);
}  // namespace ref

}  // namespace qs::kernels
