// kernels: the load-time repack of a QuantizedWeight into the resident int layout, and the
// scalar quantization of activations against it (see qmatrix.h for both layouts). The SIMD
// quantize_acts_* in cpu/ must reproduce quantize_acts here bit for bit.
#include "kernels/qmatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/check.h"

namespace qs::kernels {
namespace {

constexpr size_t kAlign = 64;

size_t round_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

// The grouping the kernels run: one group of k_pad inputs for per-channel weights (group
// size <= 0 or >= k), else the checkpoint's group size.
struct Grouping {
  int64_t group_size = 0;
  int64_t n_groups = 0;
};

Grouping grouping_of(const formats::QuantizedWeight& w) {
  const int64_t k_pad = (w.k + kQBlock - 1) / kQBlock * kQBlock;
  if (w.group_size <= 0 || w.group_size >= w.k) return {std::max<int64_t>(k_pad, kQBlock), 1};
  return {w.group_size, (w.k + w.group_size - 1) / w.group_size};
}

int resident_bits(int bits) {
  return bits <= 4 ? 4 : 8;
}

bool uniform_zeros(const formats::QuantizedWeight& w) {
  return std::all_of(w.zeros.begin(), w.zeros.end(), [&](int32_t z) { return z == w.zeros[0]; });
}

// True when g_idx is empty or every input sits in the group of its position.
bool trivial_g_idx(const formats::QuantizedWeight& w, int64_t group_size) {
  if (w.g_idx.empty()) return true;
  for (int64_t c = 0; c < w.k; ++c) {
    if (w.g_idx[c] != c / group_size) return false;
  }
  return true;
}

struct Sections {
  size_t codes = 0, scales = 0, zero_terms = 0, perm = 0, total = 0;  // byte offsets, size
  bool has_zero_terms = false, has_perm = false;
};

Sections sections_of(const formats::QuantizedWeight& w) {
  const Grouping g = grouping_of(w);
  const int64_t k_pad = (w.k + kQBlock - 1) / kQBlock * kQBlock;
  Sections s;
  s.has_zero_terms = !uniform_zeros(w);
  s.has_perm = !trivial_g_idx(w, g.group_size);
  const size_t code_bytes =
      static_cast<size_t>(w.n) * static_cast<size_t>(k_pad) * resident_bits(w.bits) / 8;
  const size_t table_bytes = static_cast<size_t>(w.n * g.n_groups) * sizeof(float);
  size_t at = 0;
  s.codes = at;
  at += round_up(code_bytes, kAlign);
  s.scales = at;
  at += round_up(table_bytes, kAlign);
  s.zero_terms = at;
  if (s.has_zero_terms) at += round_up(table_bytes, kAlign);
  s.perm = at;
  if (s.has_perm) at += round_up(static_cast<size_t>(w.k) * sizeof(int32_t), kAlign);
  s.total = at;
  return s;
}

}  // namespace

std::string qmatrix_unsupported(const formats::QuantizedWeight& w) {
  if (w.code_type == formats::CodeType::kFp8E4m3 && !w.g_idx.empty()) {
    return "fp8 with a g_idx";
  }
  if (w.bits < 1 || w.bits > 8) return "int" + std::to_string(w.bits) + " has no int kernel";
  const Grouping g = grouping_of(w);
  if (g.n_groups > 1 && g.group_size % kQBlock != 0) {
    return "group size " + std::to_string(w.group_size) + " is not a multiple of 32";
  }
  if (trivial_g_idx(w, g.group_size)) return "";
  // Act-order: after sorting inputs by group every group must be contiguous and full, so that
  // groups start on block boundaries.
  std::vector<int64_t> count(static_cast<size_t>(g.n_groups), 0);
  for (int32_t gi : w.g_idx) {
    if (gi < 0 || gi >= g.n_groups) return "g_idx holds a group out of range";
    ++count[static_cast<size_t>(gi)];
  }
  for (int64_t gi = 0; gi < g.n_groups; ++gi) {
    const int64_t want = std::min(g.group_size, w.k - gi * g.group_size);
    if (count[static_cast<size_t>(gi)] != want) return "act-order groups of unequal sizes";
  }
  return "";
}

size_t qmatrix_bytes(const formats::QuantizedWeight& w) {
  return sections_of(w).total;
}

QMatrixView qmatrix_pack(const formats::QuantizedWeight& w, void* buf) {
  QS_CHECK(qmatrix_unsupported(w).empty());
  QS_CHECK(reinterpret_cast<uintptr_t>(buf) % kAlign == 0);
  const Grouping g = grouping_of(w);
  const Sections s = sections_of(w);
  auto* base = static_cast<uint8_t*>(buf);
  std::memset(base, 0, s.total);

  QMatrixView v;
  v.fp8 = w.code_type == formats::CodeType::kFp8E4m3;
  v.fp8_pairs = v.fp8 && (g.n_groups == 1 || (g.group_size / kQBlock) % 2 == 0);
  v.bits = v.fp8 ? 8 : resident_bits(w.bits);
  v.n = w.n;
  v.k = w.k;
  v.k_pad = (w.k + kQBlock - 1) / kQBlock * kQBlock;
  v.group_size = g.group_size;
  v.n_groups = g.n_groups;

  int32_t* perm = nullptr;
  if (s.has_perm) {
    perm = reinterpret_cast<int32_t*>(base + s.perm);
    std::iota(perm, perm + w.k, 0);
    std::stable_sort(perm, perm + w.k,
                     [&](int32_t a, int32_t b) { return w.g_idx[a] < w.g_idx[b]; });
    v.perm = perm;
  }

  uint8_t* codes = base + s.codes;
  v.codes = codes;
  const size_t per_col = v.code_bytes_per_column();
  for (int64_t j = 0; j < w.n; ++j) {
    const uint8_t* src = w.codes.data() + j * w.k;
    uint8_t* dst = codes + static_cast<size_t>(j) * per_col;
    for (int64_t c = 0; c < w.k; ++c) {
      const uint8_t u = src[perm != nullptr ? perm[c] : c];
      if (v.bits == 8) {
        dst[fp8_stored_index(c, v.blocks(), v.fp8_pairs)] = u;
      } else {
        // Q4_0 order: byte i of block b holds inputs 32b+i (low) and 32b+16+i (high).
        const int64_t b = c / kQBlock, i = c % kQBlock;
        uint8_t& byte = dst[b * (kQBlock / 2) + (i % 16)];
        byte = static_cast<uint8_t>(byte | ((u & 0x0F) << (i < 16 ? 0 : 4)));
      }
    }
  }

  auto* scales = reinterpret_cast<float*>(base + s.scales);
  const size_t table = static_cast<size_t>(w.n * g.n_groups);
  std::copy(w.scales.begin(), w.scales.begin() + static_cast<std::ptrdiff_t>(table), scales);
  v.scales = scales;
  if (s.has_zero_terms) {
    auto* zero_terms = reinterpret_cast<float*>(base + s.zero_terms);
    for (size_t i = 0; i < table; ++i) zero_terms[i] = -scales[i] * static_cast<float>(w.zeros[i]);
    v.zero_terms = zero_terms;
  } else {
    v.uniform_zero = w.zeros.empty() ? 0.0f : static_cast<float>(w.zeros[0]);
  }
  return v;
}

size_t qacts_bytes(const QMatrixView& w, int64_t m) {
  const auto rows = static_cast<size_t>(m);
  const auto blocks = static_cast<size_t>(w.blocks());
  return round_up(rows * static_cast<size_t>(w.k_pad), kAlign) +
         round_up(rows * blocks * sizeof(float), kAlign) +
         round_up(rows * static_cast<size_t>(w.n_groups) * sizeof(float), kAlign) +
         round_up(rows * blocks * sizeof(int32_t), kAlign);
}

QActsBuffers qacts_buffers(const QMatrixView& w, int64_t m, void* buf) {
  auto* base = static_cast<uint8_t*>(buf);
  QActsBuffers b;
  b.q = reinterpret_cast<int8_t*>(base);
  base += round_up(static_cast<size_t>(m * w.k_pad), kAlign);
  b.d = reinterpret_cast<float*>(base);
  base += round_up(static_cast<size_t>(m * w.blocks()) * sizeof(float), kAlign);
  b.gsum = reinterpret_cast<float*>(base);
  base += round_up(static_cast<size_t>(m * w.n_groups) * sizeof(float), kAlign);
  b.qsum = reinterpret_cast<int32_t*>(base);
  b.view = {m, w.k_pad, w.n_groups, w.group_size, b.q, b.d, b.gsum, b.qsum};
  return b;
}

// Built without FMA (this file has no ISA flags), so d * qsum is rounded before the add in
// every ISA's activations alike.
void qacts_group_sums(const QMatrixView& w, const QActsBuffers& bufs) {
  const int64_t nb = w.blocks();
  const int64_t blocks_per_group = w.group_size / kQBlock;
  for (int64_t r = 0; r < bufs.view.m; ++r) {
    for (int64_t g = 0; g < w.n_groups; ++g) {
      float s = 0.0f;
      const int64_t b_end = std::min(nb, (g + 1) * blocks_per_group);
      for (int64_t b = g * blocks_per_group; b < b_end; ++b) {
        s += bufs.d[r * nb + b] * static_cast<float>(bufs.qsum[r * nb + b]);
      }
      bufs.gsum[r * w.n_groups + g] = s;
    }
  }
}

QActsView quantize_acts(const QMatrixView& w, const float* x, int64_t m, void* buf) {
  const int64_t nb = w.blocks();
  const QActsBuffers bufs = qacts_buffers(w, m, buf);
  const QActsView a = bufs.view;
  int8_t* const q = bufs.q;
  float* const d = bufs.d;
  int32_t* const qsum = bufs.qsum;

  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * w.k;
    for (int64_t b = 0; b < nb; ++b) {
      float v[kQBlock];
      float amax = 0.0f;
      for (int64_t i = 0; i < kQBlock; ++i) {
        const int64_t c = b * kQBlock + i;
        v[i] = c < w.k ? xr[w.perm != nullptr ? w.perm[c] : c] : 0.0f;
        amax = std::max(amax, std::fabs(v[i]));
      }
      // d = amax / 127 so that |q| <= 127; q = round-half-even(x * 127 / amax), the rounding
      // of cvtps2dq, so that the SIMD versions agree bit for bit.
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      int8_t* qb = q + r * w.k_pad + b * kQBlock;
      for (int64_t i = 0; i < kQBlock; ++i) {
        qb[i] = static_cast<int8_t>(std::lrintf(v[i] * id));
        sum += qb[i];
      }
      d[r * nb + b] = amax / 127.0f;
      qsum[r * nb + b] = sum;
    }
  }
  qacts_group_sums(w, bufs);
  return a;
}

QActsView quantize_acts_declared(const QMatrixView& w, const formats::ActScheme& act,
                                 float static_scale, const float* x, int64_t m, void* buf) {
  QS_CHECK(act.type == formats::ActType::kInt8 && act.sym);
  const int64_t nb = w.blocks();
  const QActsBuffers bufs = qacts_buffers(w, m, buf);
  // Blocks per activation scale: the whole row, or one declared group.
  const int64_t span = act.strategy == formats::ActStrategy::kGroup ? act.group_size / kQBlock : nb;
  QS_CHECK(span > 0 &&
           (act.strategy != formats::ActStrategy::kGroup || act.group_size % kQBlock == 0));
  // x of one row in the weight's input order; grow-only, so decode allocates nothing.
  thread_local std::vector<float> v;
  if (v.size() < static_cast<size_t>(w.k_pad)) v.resize(static_cast<size_t>(w.k_pad));
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * w.k;
    for (int64_t c = 0; c < w.k_pad; ++c) {
      v[static_cast<size_t>(c)] = c < w.k ? xr[w.perm != nullptr ? w.perm[c] : c] : 0.0f;
    }
    for (int64_t b0 = 0; b0 < nb; b0 += span) {
      const int64_t b1 = std::min(nb, b0 + span);
      float d = static_scale;
      if (act.dynamic) {
        float amax = 0.0f;
        for (int64_t c = b0 * kQBlock; c < b1 * kQBlock; ++c) {
          amax = std::max(amax, std::fabs(v[static_cast<size_t>(c)]));
        }
        d = amax / 127.0f;
      }
      for (int64_t b = b0; b < b1; ++b) {
        int32_t sum = 0;
        int8_t* qb = bufs.q + r * w.k_pad + b * kQBlock;
        for (int64_t i = 0; i < kQBlock; ++i) {
          const float xi = v[static_cast<size_t>(b * kQBlock + i)];
          const float t = d > 0.0f ? std::clamp(xi / d, -128.0f, 127.0f) : 0.0f;
          qb[i] = static_cast<int8_t>(std::lrintf(t));
          sum += qb[i];
        }
        bufs.d[r * nb + b] = d;
        bufs.qsum[r * nb + b] = sum;
      }
    }
  }
  qacts_group_sums(w, bufs);
  return bufs.view;
}

}  // namespace qs::kernels
