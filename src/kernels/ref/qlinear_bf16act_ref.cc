// kernels/ref: bf16 activations for the quantized linear and the scalar oracle (see
// qlinear_bf16act_ref.h).
#include "kernels/ref/qlinear_bf16act_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"

namespace qs::kernels {
namespace {

size_t align64(size_t b) {
  return (b + 63) / 64 * 64;
}

float code_at(const QMatrixView& w, int64_t j, int64_t c) {
  const uint8_t* col = w.codes + static_cast<size_t>(j) * w.code_bytes_per_column();
  if (w.fp8) return fp8_e4m3_to_f32(col[fp8_stored_index(c, w.blocks(), w.fp8_pairs)]);
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

size_t declared_bf16_acts_bytes(const QMatrixView& w, int64_t m) {
  return bf16_acts_bytes(w, m) + align64(static_cast<size_t>(m * w.n_groups) * 4);
}

DeclaredActsBuffers declared_bf16_acts_buffers(const QMatrixView& w, int64_t m, void* buf) {
  DeclaredActsBuffers b;
  b.x = static_cast<uint16_t*>(buf);
  b.gsum = reinterpret_cast<float*>(static_cast<uint8_t*>(buf) +
                                    align64(static_cast<size_t>(m * w.k_pad) * 2));
  b.gscale = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(b.gsum) +
                                      align64(static_cast<size_t>(m * w.n_groups) * 4));
  return b;
}

int64_t declared_act_span(const QMatrixView& w, const ActQuant& act) {
  return act.strategy == ActQuant::kGroup && act.group_size > 0 ? std::min(act.group_size, w.k)
                                                                : w.k;
}

bool declared_acts_aligned(const QMatrixView& w, const ActQuant& act) {
  const int64_t span = declared_act_span(w, act);
  return span >= w.k || (w.perm == nullptr && w.n_groups > 1 && span == w.group_size);
}

void declared_act_scale(const ActQuant& act, float lo, float hi, float amax, float* s, int32_t* z) {
  if (act.type == ActQuant::kFp8) {
    *s = std::max(amax / 448.0f, 1.0f / (448.0f * 512.0f));
  } else if (act.sym) {
    *s = amax / 127.0f;
  } else {
    *s = (hi - lo) / 255.0f;
    *z = *s > 0.0f ? static_cast<int32_t>(std::nearbyint(-128.0f - lo / *s)) : 0;
  }
}

void declared_bf16_group_sums(const QMatrixView& w, const uint16_t* row, float* gsum) {
  for (int64_t g = 0; g < w.n_groups; ++g) {
    float s = 0.0f;
    const int64_t end = std::min(w.k_pad, (g + 1) * w.group_size);
    for (int64_t c = g * w.group_size; c < end; ++c) s += bf16_to_f32(row[c]);
    gsum[g] = s;
  }
}

Bf16ActsView prepare_declared_bf16_acts(const QMatrixView& w, const ActQuant& act,
                                        float static_scale, int32_t static_zero, const float* x,
                                        int64_t m, void* buf) {
  const DeclaredActsBuffers out = declared_bf16_acts_buffers(w, m, buf);
  const bool fp8 = act.type == ActQuant::kFp8;
  const int64_t span = declared_act_span(w, act);
  const bool aligned = declared_acts_aligned(w, act);
  // One row's grid values and scales in x's order; grow-only, so decode allocates nothing.
  thread_local std::vector<float> value, scale;
  if (value.size() < static_cast<size_t>(w.k)) {
    value.resize(static_cast<size_t>(w.k));
    scale.resize(static_cast<size_t>(w.k));
  }
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * w.k;
    for (int64_t c0 = 0; c0 < w.k; c0 += span) {
      const int64_t c1 = std::min(w.k, c0 + span);
      float s = static_scale;
      int32_t z = static_zero;
      if (act.dynamic) {
        float lo = 0.0f, hi = 0.0f, amax = 0.0f;
        for (int64_t c = c0; c < c1; ++c) {
          lo = std::min(lo, xr[c]);
          hi = std::max(hi, xr[c]);
          amax = std::max(amax, std::fabs(xr[c]));
        }
        declared_act_scale(act, lo, hi, amax, &s, &z);
      }
      for (int64_t c = c0; c < c1; ++c) {
        float v = 0.0f;
        if (s > 0.0f) {
          if (fp8) {
            v = round_to_e4m3(xr[c] / s);
          } else {
            const float q =
                std::clamp(std::nearbyint(xr[c] / s) + static_cast<float>(z), -128.0f, 127.0f);
            v = q - static_cast<float>(z);
          }
        }
        value[static_cast<size_t>(c)] = v;
        scale[static_cast<size_t>(c)] = s;
      }
    }
    uint16_t* row = out.x + r * w.k_pad;
    for (int64_t c = 0; c < w.k_pad; ++c) {
      if (c >= w.k) {
        row[c] = 0;
        continue;
      }
      const auto at = static_cast<size_t>(w.perm != nullptr ? w.perm[c] : c);
      row[c] = f32_to_bf16(aligned ? value[at] : scale[at] * value[at]);
    }
    declared_bf16_group_sums(w, row, out.gsum + r * w.n_groups);
    for (int64_t g = 0; g < w.n_groups; ++g) {
      const int64_t first = std::min(w.k - 1, g * w.group_size);
      out.gscale[r * w.n_groups + g] =
          aligned ? scale[static_cast<size_t>(w.perm != nullptr ? w.perm[first] : first)] : 1.0f;
    }
  }
  Bf16ActsView v{m, w.k_pad, w.n_groups, out.x, out.gsum};
  v.gscale = out.gscale;
  return v;
}

namespace ref {

void qlinear_bf16panels(const QPanelsView& w, const Bf16ActsView& a, const float* bias,
                        int64_t n_begin, int64_t n_end, float* y) {
  for (int64_t i = 0; i < a.m; ++i) {
    const uint16_t* x = a.x + i * a.k_pad;
    for (int64_t j = n_begin; j < n_end; ++j) {
      float total = 0.0f;
      for (int64_t g = 0; g < w.n_groups; ++g) {
        const size_t at =
            static_cast<size_t>(((j / kPanelCols) * w.n_groups + g) * kPanelCols + j % kPanelCols);
        float acc = 0.0f;
        const int64_t c_end = std::min(w.k_pad, (g + 1) * w.group_size);
        for (int64_t c = g * w.group_size; c < c_end; ++c) {
          const float u = static_cast<float>(qpanels_code(w, j, c));
          acc += (w.zero_terms != nullptr ? u : u - w.uniform_zero) * bf16_to_f32(x[c]);
        }
        total += w.scales[at] * acc;
        if (w.zero_terms != nullptr) total += w.zero_terms[at] * a.gsum[i * a.n_groups + g];
      }
      y[i * w.n + j] = total + (bias != nullptr ? bias[j] : 0.0f);
    }
  }
}

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
        const double gs = a.gscale != nullptr ? a.gscale[i * w.n_groups + g] : 1.0;
        acc += gs * (w.scales[at] * dot + zt * a.gsum[i * w.n_groups + g]);
      }
      y[i * w.n + j] = static_cast<float>(acc) + (bias != nullptr ? bias[j] : 0.0f);
    }
  }
}

}  // namespace ref
}  // namespace qs::kernels
