// kernels/cuda: the W4A16 GEMM's resident layout (w4a16_layout.h): the load-time pack, written
// from the writer's side (where each code goes), and the reference unpack, written from the
// reader's side (what each lane's word holds), so that the two check each other.
#include "kernels/cuda/w4a16_layout.h"

#include <algorithm>
#include <cstring>

#include "core/dtype.h"

namespace qs::kernels::cuda {
namespace {

size_t align_up(size_t bytes) {
  return (bytes + kW4Align - 1) / kW4Align * kW4Align;
}

int64_t round_up(int64_t v, int64_t to) {
  return (v + to - 1) / to * to;
}

void store_scale(W4ScaleType t, void* base, int64_t i, float v) {
  switch (t) {
    case W4ScaleType::kF32:
      static_cast<float*>(base)[i] = v;
      return;
    case W4ScaleType::kF16:
      static_cast<uint16_t*>(base)[i] = f32_to_f16(v);
      return;
    case W4ScaleType::kBF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16(v);
      return;
  }
}

float load_scale(W4ScaleType t, const void* base, int64_t i) {
  switch (t) {
    case W4ScaleType::kF32:
      return static_cast<const float*>(base)[i];
    case W4ScaleType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case W4ScaleType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
  }
  return 0.0f;
}

}  // namespace

size_t w4_scale_bytes(W4ScaleType t) {
  return t == W4ScaleType::kF32 ? 4 : 2;
}

W4A16Layout w4a16_layout(const W4A16Source& src) {
  W4A16Layout l;
  l.n = src.n;
  l.k = src.k;
  l.n_pad = round_up(std::max<int64_t>(src.n, 1), kW4PadN);
  l.k_pad = round_up(std::max<int64_t>(src.k, 1), kW4PadK);
  l.group_size = src.group_size > 0 ? src.group_size : l.k_pad;
  l.n_groups = (l.k_pad + l.group_size - 1) / l.group_size;
  l.scale_type = src.scale_type;
  l.has_zeros = src.zeros != nullptr;
  l.has_perm = src.perm != nullptr;
  l.uniform_zero = src.uniform_zero;
  const auto table = static_cast<size_t>(l.n_groups * l.n_pad);
  size_t at = 0;
  l.qweight_offset = at;
  at += align_up(static_cast<size_t>(l.n_pad * l.k_pad / 2));
  l.scales_offset = at;
  at += align_up(table * w4_scale_bytes(l.scale_type));
  l.zeros_offset = at;
  if (l.has_zeros) at += align_up(table);
  l.perm_offset = at;
  if (l.has_perm) at += align_up(static_cast<size_t>(l.k) * sizeof(int32_t));
  l.total_bytes = at;
  return l;
}

W4A16View w4a16_view(const W4A16Layout& l, const void* base) {
  const auto* b = static_cast<const uint8_t*>(base);
  W4A16View v;
  v.n = l.n;
  v.k = l.k;
  v.n_pad = l.n_pad;
  v.k_pad = l.k_pad;
  v.group_size = l.group_size;
  v.n_groups = l.n_groups;
  v.qweight = reinterpret_cast<const uint32_t*>(b + l.qweight_offset);
  v.scales = b + l.scales_offset;
  v.scale_type = l.scale_type;
  v.zeros = l.has_zeros ? b + l.zeros_offset : nullptr;
  v.uniform_zero = l.uniform_zero;
  v.perm = l.has_perm ? reinterpret_cast<const int32_t*>(b + l.perm_offset) : nullptr;
  return v;
}

W4A16View w4a16_pack(const W4A16Source& src, void* buf) {
  const W4A16Layout l = w4a16_layout(src);
  auto* base = static_cast<uint8_t*>(buf);
  std::memset(base, 0, l.total_bytes);
  auto* words = reinterpret_cast<uint32_t*>(base + l.qweight_offset);
  const int64_t k_tiles = l.k_pad / kW4Tile;
  for (int64_t j = 0; j < src.n; ++j) {
    const uint8_t* row = src.codes + j * src.k;
    // Output j: strip j / 16; within it half h, fragment column g (the lane's group).
    const int64_t strip = j / kW4Tile, h = (j % kW4Tile) / 8, g = j % 8;
    for (int64_t c = 0; c < src.k; ++c) {
      const uint32_t u = row[src.perm != nullptr ? src.perm[c] : c] & 0xFu;
      // Input c: tile c / 16; within it register r, lane's t and half-word e.
      const int64_t ktile = c / kW4Tile, cc = c % kW4Tile;
      const int64_t r = cc / 8, t = (cc % 8) / 2, e = cc % 2;
      const int64_t lane = 4 * g + t;
      const int64_t nibble = (2 * h + r) + 4 * e;
      words[(strip * k_tiles + ktile) * kW4TileWords + lane] |= u << (4 * nibble);
    }
  }
  const int64_t src_groups = src.group_size > 0 ? (src.k + src.group_size - 1) / src.group_size : 1;
  void* scales = base + l.scales_offset;
  uint8_t* zeros = l.has_zeros ? base + l.zeros_offset : nullptr;
  for (int64_t j = 0; j < src.n; ++j) {
    for (int64_t gi = 0; gi < src_groups; ++gi) {
      store_scale(l.scale_type, scales, gi * l.n_pad + j, src.scales[j * src_groups + gi]);
      if (zeros != nullptr) {
        zeros[gi * l.n_pad + j] = static_cast<uint8_t>(src.zeros[j * src_groups + gi]);
      }
    }
  }
  if (l.has_perm) {
    std::memcpy(base + l.perm_offset, src.perm, static_cast<size_t>(src.k) * sizeof(int32_t));
  }
  return w4a16_view(l, buf);
}

void w4a16_dequantize_packed(const W4A16View& w, float* out) {
  const int64_t k_tiles = w.k_pad / kW4Tile;
  for (int64_t strip = 0; strip < w.n_pad / kW4Tile; ++strip) {
    for (int64_t ktile = 0; ktile < k_tiles; ++ktile) {
      const uint32_t* tile = w.qweight + (strip * k_tiles + ktile) * kW4TileWords;
      for (int lane = 0; lane < 32; ++lane) {
        const uint32_t word = tile[lane];
        const int g = lane / 4, t = lane % 4;
        for (int s = 0; s < 4; ++s) {
          // Pair s is register b_(s % 2) of the tile's n8 half s / 2.
          const int h = s / 2, r = s % 2;
          const int64_t j = strip * kW4Tile + 8 * h + g;
          const uint32_t pair = w4_pair_bits(word, s);
          for (int e = 0; e < 2; ++e) {
            const int64_t c = ktile * kW4Tile + 8 * r + 2 * t + e;
            if (j >= w.n || c >= w.k) continue;
            const int64_t gi = c / w.group_size;
            const uint32_t zero = w.zeros != nullptr ? w.zeros[gi * w.n_pad + j]
                                                     : static_cast<uint32_t>(w.uniform_zero);
            const uint32_t zbits = w4_zero_bits(zero);
            // Both halves are bf16; their difference is exact (integers below 2^8).
            const float v = bf16_to_f32(static_cast<uint16_t>(pair >> (16 * e))) -
                            bf16_to_f32(static_cast<uint16_t>(zbits >> (16 * e)));
            const float scale = load_scale(w.scale_type, w.scales, gi * w.n_pad + j);
            out[j * w.k + (w.perm != nullptr ? w.perm[c] : c)] = scale * v;
          }
        }
      }
    }
  }
}

}  // namespace qs::kernels::cuda
