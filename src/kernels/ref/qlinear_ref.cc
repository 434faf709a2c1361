// kernels/ref: the scalar oracle of the quantized linear (see qlinear_ref.h). Written for
// obviousness: one code at a time, straight from the formulas in kernels/qmatrix.h.
#include "kernels/ref/qlinear_ref.h"

#include <algorithm>

namespace qs::kernels::ref {
namespace {

// The unsigned code of repacked input c of output column j.
int code_at(const QMatrixView& w, int64_t j, int64_t c) {
  const uint8_t* col = w.codes + static_cast<size_t>(j) * w.code_bytes_per_column();
  if (w.bits == 8) return col[c];
  const int64_t b = c / kQBlock, i = c % kQBlock;
  const uint8_t byte = col[b * (kQBlock / 2) + (i % 16)];
  return i < 16 ? (byte & 0x0F) : (byte >> 4);
}

float zero_term(const QMatrixView& w, int64_t j, int64_t g) {
  const size_t at = static_cast<size_t>(j * w.n_groups + g);
  return w.zero_terms != nullptr ? w.zero_terms[at] : -w.scales[at] * w.uniform_zero;
}

}  // namespace

void qlinear_exact(const QMatrixView& w, const float* x, int64_t m, int64_t n_begin, int64_t n_end,
                   float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * w.k;
    for (int64_t j = n_begin; j < n_end; ++j) {
      // Double accumulation: the oracle should carry no summation error of its own.
      double acc = 0.0;
      for (int64_t c = 0; c < w.k; ++c) {
        const int64_t g = c / w.group_size;
        const float wv = w.scales[j * w.n_groups + g] * static_cast<float>(code_at(w, j, c)) +
                         zero_term(w, j, g);
        acc += static_cast<double>(wv) * xi[w.perm != nullptr ? w.perm[c] : c];
      }
      y[i * w.n + j] = static_cast<float>(acc);
    }
  }
}

void qlinear_int8(const QMatrixView& w, const QActsView& a, int64_t n_begin, int64_t n_end,
                  float* y) {
  const int64_t nb = w.blocks();
  const int64_t blocks_per_group = w.group_size / kQBlock;
  for (int64_t i = 0; i < a.m; ++i) {
    for (int64_t j = n_begin; j < n_end; ++j) {
      float acc = 0.0f;
      for (int64_t g = 0; g < w.n_groups; ++g) {
        float group = 0.0f;
        const int64_t b_end = std::min(nb, (g + 1) * blocks_per_group);
        for (int64_t b = g * blocks_per_group; b < b_end; ++b) {
          int32_t dot = 0;
          for (int64_t t = 0; t < kQBlock; ++t) {
            const int64_t c = b * kQBlock + t;
            dot += code_at(w, j, c) * a.q[i * a.k_pad + c];
          }
          group += a.d[i * nb + b] * static_cast<float>(dot);
        }
        acc +=
            w.scales[j * w.n_groups + g] * group + zero_term(w, j, g) * a.gsum[i * w.n_groups + g];
      }
      y[i * w.n + j] = acc;
    }
  }
}

}  // namespace qs::kernels::ref
