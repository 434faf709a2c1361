// kernels: the panel layout of qpanels.h, filled from the per-column layout of qmatrix.h once
// at load (scalar: it runs once per weight).
#include "kernels/qpanels.h"

#include <cmath>
#include <cstring>

#include "core/check.h"

namespace qs::kernels {
namespace {

// The code of column j, input c in qmatrix.h's per-column 4-bit layout.
uint8_t column_code(const QMatrixView& w, int64_t j, int64_t c) {
  const uint8_t* col = w.codes + static_cast<size_t>(j) * w.code_bytes_per_column();
  const int64_t b = c / kQBlock, i = c % kQBlock;
  const uint8_t byte = col[b * 16 + i % 16];
  return i < 16 ? byte & 0x0F : byte >> 4;
}

// Where column l, input c of a panel sits: byte offset in the panel, and the shift of its
// nibble within the byte.
void locate(int64_t l, int64_t c, size_t* byte, int* shift) {
  const int64_t q = c / 8, t = (c % 8) / 2, e = c % 2;
  const int64_t word = 2 * l + e;
  *byte = static_cast<size_t>(q * kPanelChunk + word * 2 + t / 2);
  *shift = static_cast<int>(t % 2) * 4;
}

}  // namespace

bool qpanels_supported(const QMatrixView& w) {
  if (w.bits != 4 || w.fp8) return false;
  return w.zero_terms != nullptr || w.uniform_zero == std::floor(w.uniform_zero);
}

size_t qpanels_bytes(const QMatrixView& w) {
  const auto panels = static_cast<size_t>((w.n + kPanelCols - 1) / kPanelCols);
  const size_t tables = panels * static_cast<size_t>(w.n_groups * kPanelCols) * sizeof(float);
  return qalign_up(panels * static_cast<size_t>(w.k_pad / 8 * kPanelChunk)) + qalign_up(tables) +
         (w.zero_terms != nullptr ? qalign_up(tables) : 0);
}

QPanelsView qpanels_pack(const QMatrixView& w, void* buf) {
  QS_CHECK(qpanels_supported(w));
  QPanelsView p;
  p.n = w.n;
  p.k_pad = w.k_pad;
  p.group_size = w.group_size;
  p.n_groups = w.n_groups;
  p.uniform_zero = w.uniform_zero;
  const int64_t panels = p.panels();
  auto* base = static_cast<uint8_t*>(buf);
  const size_t code_bytes = static_cast<size_t>(panels) * p.panel_bytes();
  std::memset(base, 0, code_bytes);
  for (int64_t j = 0; j < w.n; ++j) {
    uint8_t* panel = base + static_cast<size_t>(j / kPanelCols) * p.panel_bytes();
    for (int64_t c = 0; c < w.k_pad; ++c) {
      size_t byte = 0;
      int shift = 0;
      locate(j % kPanelCols, c, &byte, &shift);
      panel[byte] = static_cast<uint8_t>(panel[byte] | column_code(w, j, c) << shift);
    }
  }
  p.codes = base;
  base += qalign_up(code_bytes);
  const size_t table_floats = static_cast<size_t>(panels * w.n_groups * kPanelCols);
  auto fill = [&](const float* per_column, float* out) {
    std::memset(out, 0, table_floats * sizeof(float));
    for (int64_t j = 0; j < w.n; ++j) {
      for (int64_t g = 0; g < w.n_groups; ++g) {
        out[((j / kPanelCols) * w.n_groups + g) * kPanelCols + j % kPanelCols] =
            per_column[j * w.n_groups + g];
      }
    }
  };
  auto* scales = reinterpret_cast<float*>(base);
  fill(w.scales, scales);
  p.scales = scales;
  base += qalign_up(table_floats * sizeof(float));
  if (w.zero_terms != nullptr) {
    auto* zt = reinterpret_cast<float*>(base);
    fill(w.zero_terms, zt);
    p.zero_terms = zt;
  }
  return p;
}

uint8_t qpanels_code(const QPanelsView& p, int64_t j, int64_t c) {
  size_t byte = 0;
  int shift = 0;
  locate(j % kPanelCols, c, &byte, &shift);
  return (p.codes[static_cast<size_t>(j / kPanelCols) * p.panel_bytes() + byte] >> shift) & 0x0F;
}

}  // namespace qs::kernels
