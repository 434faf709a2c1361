// kernels/cpu: the pair-panel repacking of bf16 weights (linear_cpu.h, "Pair panels"). Scalar:
// it runs once per weight at load, and a 136 M-element lm_head packs in well under a second.
#include <algorithm>

#include "kernels/cpu/linear_cpu.h"

namespace qs::kernels::cpu {

int64_t pair_panel_elems(int64_t n, int64_t k) {
  return (n + kPanelCols - 1) / kPanelCols * kPanelCols * k;
}

void pack_bf16_pair_panels(const uint16_t* w, int64_t n, int64_t k, uint16_t* out) {
  constexpr int64_t kHalf = kPanelCols / 2;
  for (int64_t j0 = 0; j0 < n; j0 += kPanelCols) {
    uint16_t* panel = out + j0 * k;
    // Column by column, so each source row is read in order; the panel (64 B per k step)
    // is written with a stride but stays in cache for the 32 rows that fill it.
    for (int64_t c = 0; c < kPanelCols; ++c) {
      const int64_t slot = c < kHalf ? 2 * c : 2 * (c - kHalf) + 1;
      if (j0 + c >= n) {
        for (int64_t kk = 0; kk < k; ++kk) panel[kk * kPanelCols + slot] = 0;
        continue;
      }
      const uint16_t* row = w + (j0 + c) * k;
      for (int64_t kk = 0; kk < k; ++kk) panel[kk * kPanelCols + slot] = row[kk];
    }
  }
}

}  // namespace qs::kernels::cpu
