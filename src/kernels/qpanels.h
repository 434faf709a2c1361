// kernels: the resident layout of a 4-bit weight for the exact (bf16-activation) kernels: the
// codes of qmatrix.h regrouped into panels of 16 output columns, in the order vdpbf16ps
// consumes them, so that a call decodes codes in registers and accumulates 16 columns per
// instruction with no per-call unpack and no horizontal sums (the per-column layout of
// qmatrix.h needs one reduction per column and group).
//
// Columns are taken 16 at a time (the last panel padded with zero codes and zero scales). A
// panel holds k_pad / 8 chunks of 64 bytes; chunk q covers inputs 8q .. 8q + 7 of its 16
// columns: 16-bit word w = 2l + e holds, in its nibble t (bits 4t .. 4t + 3), the code of
// column l for input 8q + 2t + e. One vpermw per nibble position turns a chunk's word t
// into 16 bf16 pairs (column l, inputs 8q + 2t and 8q + 2t + 1), which vdpbf16ps multiplies
// by the broadcast pair of x.
//   scales [panels, n_groups, 16] f32; zero_terms the same, or nullptr when every group's
//   zero is `uniform_zero` (the kernels then subtract it from the codes: integer codes minus an
//   integer zero stay exact in bf16).
// The activations are those of ref/qlinear_bf16act_ref.h (Bf16ActsView: bf16 x permuted by the
// weight's perm, group sums), so act-order weights need nothing more here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/qmatrix.h"

namespace qs::kernels {

constexpr int64_t kPanelCols = 16;
constexpr int64_t kPanelChunk = 64;  // bytes per 8 inputs of a panel

struct QPanelsView {
  int64_t n = 0, k_pad = 0;
  int64_t group_size = 0, n_groups = 0;
  const uint8_t* codes = nullptr;     // [panels, k_pad / 8, 64]
  const float* scales = nullptr;      // [panels, n_groups, 16]
  const float* zero_terms = nullptr;  // [panels, n_groups, 16] or nullptr
  float uniform_zero = 0;             // when zero_terms is null

  int64_t panels() const { return (n + kPanelCols - 1) / kPanelCols; }
  size_t panel_bytes() const { return static_cast<size_t>(k_pad / 8 * kPanelChunk); }
};

// Whether `w` can be laid out as panels: 4-bit integer codes (2- and 3-bit ones ride in
// nibbles too) and, without zero terms, an integral zero (so code - zero is exact).
bool qpanels_supported(const QMatrixView& w);
// Bytes qpanels_pack writes (codes, scales, zero terms; each 64-byte aligned).
size_t qpanels_bytes(const QMatrixView& w);
// Regroups `w` (qpanels_supported) into `buf` (qpanels_bytes(w) bytes, 64-byte aligned).
QPanelsView qpanels_pack(const QMatrixView& w, void* buf);
// The code of column j, input c: for tests of the layout.
uint8_t qpanels_code(const QPanelsView& p, int64_t j, int64_t c);

}  // namespace qs::kernels
