// kernels/ref: bf16 activations for the quantized linear and the scalar oracle (see
// qlinear_bf16act_ref.h).
#include "kernels/ref/qlinear_bf16act_ref.h"

#include <algorithm>
#include <cstring>

namespace qs::kernels {
namespace {

size_t align64(size_t b) {
  return (b + 63) / 64 * 64;
}

int code_at(const QMatrixView& w, int64_t j, int64_t c) {
  const uint8_t* col = w.codes + static_cast<size_t>(j) * w.code_bytes_per_column();
  if (w.bits == 8) return col[c];
  const int64_t b = c / kQBlock, i = c % kQBlock;
  const uint8_t byte = col[b * (kQBlock / 2) + (i % 16)];
  return i < 16 ? (byte & 0x0F) : (byte >> 4);
}

}  // namespace

uint16_t f32_to_bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  }
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

size_t bf16_acts_bytes(const QMatrixView& w, int64_t m) {
  return align64(static_cast<size_t>(m * w.k_pad) * 2) +
         align64(static_cast<size_t>(m * w.n_groups) * 4);
}

Bf16ActsView prepare_bf16_acts(const QMatrixView& w, const float* x, int64_t m, void* buf) {
  auto* xb = static_cast<uint16_t*>(buf);
  auto* gsum = reinterpret_cast<float*>(static_cast<uint8_t*>(buf) +
                                        align64(static_cast<size_t>(m * w.k_pad) * 2));
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * w.k;
    uint16_t* row = xb + i * w.k_pad;
    for (int64_t c = 0; c < w.k_pad; ++c) {
      row[c] = c < w.k ? f32_to_bf16(xi[w.perm != nullptr ? w.perm[c] : c]) : 0;
    }
    for (int64_t g = 0; g < w.n_groups; ++g) {
      float s = 0.0f;
      const int64_t end = std::min(w.k_pad, (g + 1) * w.group_size);
      for (int64_t c = g * w.group_size; c < end; ++c) s += bf16_to_f32(row[c]);
      gsum[i * w.n_groups + g] = s;
    }
  }
  return Bf16ActsView{m, w.k_pad, w.n_groups, xb, gsum};
}

namespace ref {

void qlinear_bf16act(const QMatrixView& w, const Bf16ActsView& a, const float* bias,
                     int64_t n_begin, int64_t n_end, float* y) {
  for (int64_t i = 0; i < a.m; ++i) {
    const uint16_t* xi = a.x + i * a.k_pad;
    for (int64_t j = n_begin; j < n_end; ++j) {
      // Double sums: the oracle carries no summation error of its own (the SIMD kernel's
      // f32 sums are within float rounding of it).
      double acc = 0.0;
      for (int64_t g = 0; g < w.n_groups; ++g) {
        double dot = 0.0;
        const int64_t end = std::min(w.k_pad, (g + 1) * w.group_size);
        for (int64_t c = g * w.group_size; c < end; ++c)
          dot += code_at(w, j, c) * bf16_to_f32(xi[c]);
        const size_t at = static_cast<size_t>(j * w.n_groups + g);
        const double zt =
            w.zero_terms != nullptr ? w.zero_terms[at] : -w.scales[at] * w.uniform_zero;
        acc += w.scales[at] * dot + zt * a.gsum[i * w.n_groups + g];
      }
      y[i * w.n + j] = static_cast<float>(acc) + (bias != nullptr ? bias[j] : 0.0f);
    }
  }
}

}  // namespace ref
}  // namespace qs::kernels
