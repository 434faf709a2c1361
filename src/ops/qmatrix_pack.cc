// ops: the load-time repack of a checkpoint's QuantizedWeight (formats/) into the resident int
// layout the kernels run (kernels/qmatrix.h). Here rather than in kernels/ because it is the
// one place that reads a formats type: kernels take the plain QMatrixView it returns.
#include "ops/qmatrix_pack.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/check.h"

namespace qs::ops {
namespace {

using kernels::fp8_stored_index;
using kernels::kQBlock;
using kernels::qalign_up;
using kernels::QMatrixView;

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
  at += qalign_up(code_bytes);
  s.scales = at;
  at += qalign_up(table_bytes);
  s.zero_terms = at;
  if (s.has_zero_terms) at += qalign_up(table_bytes);
  s.perm = at;
  if (s.has_perm) at += qalign_up(static_cast<size_t>(w.k) * sizeof(int32_t));
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
  QS_CHECK(reinterpret_cast<uintptr_t>(buf) % kernels::kQAlign == 0);
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

kernels::ActQuant act_quant_of(const formats::ActScheme& act) {
  kernels::ActQuant a;
  a.type = act.type == formats::ActType::kFp8 ? kernels::ActQuant::kFp8 : kernels::ActQuant::kInt8;
  switch (act.strategy) {
    case formats::ActStrategy::kToken:
      a.strategy = kernels::ActQuant::kToken;
      break;
    case formats::ActStrategy::kTensor:
      a.strategy = kernels::ActQuant::kTensor;
      break;
    case formats::ActStrategy::kGroup:
      a.strategy = kernels::ActQuant::kGroup;
      break;
  }
  a.dynamic = act.dynamic;
  a.sym = act.sym;
  a.group_size = act.group_size;
  return a;
}

}  // namespace qs::ops
