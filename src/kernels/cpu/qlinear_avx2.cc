// kernels/cpu: AVX2 (+FMA, F16C; no VNNI, no AVX-512) quantized linear kernels over the
// resident layout of kernels/qmatrix.h: unsigned int4/int8 codes times int8 activations,
// integer dot products per 32-input block, scaled and summed in f32. The GEMV streams each
// column's codes once for all rows; the GEMM reuses a small column tile over row tiles.
// Compiled with -mavx2 -mfma -mf16c (file suffix _avx2.cc); no allocation.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/cpu/reduce_avx2.h"

namespace qs::kernels::cpu {
namespace {

// ---- block pairs ----------------------------------------------------------------------
// The kernels work on pairs of 32-input blocks (A = 2p, B = 2p + 1): one integer dot product
// yields an i32x8 whose lanes each hold a partial sum of A or of B, so one conversion and
// one FMA (by a vector of the two blocks' scales) serve 64 inputs. Which lanes hold A is
// the width's pair_lanes() pattern (1 = B). A group or row ending on an odd block finishes
// with a single block whose 8 lanes all belong to it.

// int4: 16 code bytes per block, byte i = input i (low nibble) and 16 + i (high nibble).
// The 32 bytes of a pair are {A 0..15 | B 0..15} in the low nibbles and {A 16..31 | B
// 16..31} in the high ones, so the activations are regrouped to match (two lane permutes,
// shared by every column of a tile). maddubs pairs u8 codes with s8 activations and cannot
// saturate: 2 * 15 * 127 = 3810, and the two halves added still fit i16 (7620 < 32767).
struct Int4 {
  static constexpr int64_t kBlockBytes = 16;
  static constexpr bool kResident = true;  // codes read from the resident layout
  static __m256i pair_lanes() { return _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1); }

  struct Codes {
    __m256i lo, hi;
  };
  struct Acts {
    __m256i lo, hi;
  };

  static Codes codes_pair(const uint8_t* p) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i mask = _mm256_set1_epi8(0x0F);
    return {_mm256_and_si256(v, mask), _mm256_and_si256(_mm256_srli_epi16(v, 4), mask)};
  }
  static Acts acts_pair(const int8_t* q) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + kQBlock));
    return {_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31)};
  }
  static __m256i dot_pair(const Codes& c, const Acts& a) {
    const __m256i s16 =
        _mm256_add_epi16(_mm256_maddubs_epi16(c.lo, a.lo), _mm256_maddubs_epi16(c.hi, a.hi));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  }
  // One block: its 16 bytes unpacked to the 32 codes in input order.
  static __m256i dot_single(const uint8_t* p, const int8_t* q) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m256i u =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
  }
};

// int4 codes the GEMM has unpacked into a panel once per column tile (unpack_int4), so that
// its row tiles load them instead of unpacking them again: 32 bytes per block, a pair as its
// low-nibble vector then its high-nibble one, a lone last block as its 32 codes in order.
struct Int4Panel {
  using Resident = Int4;
  using Codes = Int4::Codes;
  using Acts = Int4::Acts;
  static constexpr int64_t kBlockBytes = 32;
  static constexpr bool kResident = false;
  static __m256i pair_lanes() { return Int4::pair_lanes(); }
  static Acts acts_pair(const int8_t* q) { return Int4::acts_pair(q); }
  static __m256i dot_pair(const Codes& c, const Acts& a) { return Int4::dot_pair(c, a); }

  static Codes codes_pair(const uint8_t* p) {
    return {_mm256_load_si256(reinterpret_cast<const __m256i*>(p)),
            _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32))};
  }
  static __m256i dot_single(const uint8_t* p, const int8_t* q) {
    const __m256i u = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
  }
};

// int8: 32 code bytes per block in input order. Codes reach 255, so maddubs (u8 x s8 pairs
// summed into i16) could saturate (2 * 255 * 127 > 32767). Both operands are widened to i16
// instead (vpmovzxbw / vpmovsxbw) and multiplied with vpmaddwd, which is exact. The
// alternative, codes - 128 made signed and multiplied by the vpsignb/vpabsb trick with
// 128 * qsum added back, needs per block and output sign, maddubs, madd and the correction
// add where this needs two madds and an add, and per column an xor and an abs where this
// needs two widenings: no fewer instructions (counted, not measured), and decode of int8 is
// bound by memory anyway (hot 38 GB/s against a 35 GB/s DRAM stream, 896 x 4864, m = 1).
struct Int8 {
  static constexpr int64_t kBlockBytes = 32;
  static constexpr bool kResident = true;
  static __m256i pair_lanes() { return _mm256_setr_epi32(0, 0, 1, 1, 0, 0, 1, 1); }

  struct Codes {
    __m256i a0, a1, b0, b1;  // i16: inputs 0..15 and 16..31 of A, then of B
  };
  using Acts = Codes;

  static __m256i widen_u(const uint8_t* p) {
    return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m256i widen_s(const int8_t* p) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Codes codes_pair(const uint8_t* p) {
    return {widen_u(p), widen_u(p + 16), widen_u(p + 32), widen_u(p + 48)};
  }
  static Acts acts_pair(const int8_t* q) {
    return {widen_s(q), widen_s(q + 16), widen_s(q + 32), widen_s(q + 48)};
  }
  // Block sums sa, sb (8 lanes each) interleaved by 64-bit halves: lanes {A, A, B, B, ...}.
  static __m256i dot_pair(const Codes& c, const Acts& a) {
    const __m256i sa =
        _mm256_add_epi32(_mm256_madd_epi16(c.a0, a.a0), _mm256_madd_epi16(c.a1, a.a1));
    const __m256i sb =
        _mm256_add_epi32(_mm256_madd_epi16(c.b0, a.b0), _mm256_madd_epi16(c.b1, a.b1));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(sa, sb), _mm256_unpackhi_epi64(sa, sb));
  }
  static __m256i dot_single(const uint8_t* p, const int8_t* q) {
    return _mm256_add_epi32(_mm256_madd_epi16(widen_u(p), widen_s(q)),
                            _mm256_madd_epi16(widen_u(p + 16), widen_s(q + 16)));
  }
};

// int8 codes the GEMM has widened into a panel once per column tile (unpack_int8): per
// block its 32 codes as i16, so that row tiles skip the widening.
struct Int8Panel {
  using Resident = Int8;
  using Codes = Int8::Codes;
  using Acts = Int8::Acts;
  static constexpr int64_t kBlockBytes = 64;
  static constexpr bool kResident = false;
  static __m256i pair_lanes() { return Int8::pair_lanes(); }
  static Acts acts_pair(const int8_t* q) { return Int8::acts_pair(q); }
  static __m256i dot_pair(const Codes& c, const Acts& a) { return Int8::dot_pair(c, a); }

  static __m256i load(const uint8_t* p) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
  }
  static Codes codes_pair(const uint8_t* p) {
    return {load(p), load(p + 32), load(p + 64), load(p + 96)};
  }
  static __m256i dot_single(const uint8_t* p, const int8_t* q) {
    return _mm256_add_epi32(_mm256_madd_epi16(load(p), Int8::widen_s(q)),
                            _mm256_madd_epi16(load(p + 32), Int8::widen_s(q + 16)));
  }
};

// v[0] in the lanes of block A, v[1] in those of B (the width's pair_lanes pattern).
template <class W>
__m256 pair_scales(const float* v) {
  const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), W::pair_lanes());
}

// sum_g a[g] * b[g] over n values.
float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = reduce_add(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// ---- the tile kernel ------------------------------------------------------------------
// A column's codes are a few KiB, too short a stream for the hardware prefetcher to reach
// full speed before it ends; each pair step therefore prefetches (into L2, as the dense
// GEMV does) the codes of the column some distance on in the contiguous code stream: the
// next 4-column tile, and at least kPrefetchBytes ahead so that short columns still cover
// DRAM latency; the scales and zero terms likewise, one line per 16 groups.
// Measured, m = 1, one thread, 74 MB of matrices: 896 x 4864 int4 g128 9.6 GB/s without,
// 26 GB/s with one tile (9.7 KB); 4864 x 896 12 GB/s with one tile (1.8 KB), 19 GB/s with
// 8 KB, no better further ahead; 896 x 4864 int4 g32 17 GB/s without the table prefetch,
// 28 GB/s with it. Prefetches past the end of a buffer never fault.
constexpr int64_t kPrefetchBytes = 8192;

// How many columns ahead the prefetches point, for columns of `code_bytes` codes.
int64_t prefetch_columns(int64_t code_bytes) {
  return std::max<int64_t>(4, (kPrefetchBytes + code_bytes - 1) / code_bytes);
}

// y[i0 + r, j0 + c] for r < MR, c < NC: each pair's codes are unpacked once per column and
// used for the MR rows, each pair's activations once per row and used for the NC columns.
// acc[r][c] += f32(dot) * (d[r, pair] * scale[c, g]); the zero terms, sum_g zero_term[c, g]
// * gsum[r, g], are a short dot product per output added at the end with the bias.
template <class W, int MR, int NC>
void tile(const QLinearArgs& args, int64_t i0, int64_t j0, const uint8_t* panel) {
  const QMatrixView& w = *args.w;
  const QActsView& x = *args.a;
  const int64_t n_blocks = w.blocks(), n_groups = w.n_groups;
  const int64_t blocks_per_group = w.group_size / kQBlock;
  const uint8_t* codes[NC] = {};
  const float* scales[NC] = {};
  // The codes and per-group tables of the column prefetch_cols on (see kPrefetchBytes).
  const auto code_bytes = static_cast<int64_t>(w.code_bytes_per_column());
  const int64_t prefetch_cols = prefetch_columns(code_bytes);
  const int64_t prefetch_ahead = prefetch_cols * code_bytes;
  const int64_t table_ahead = prefetch_cols * n_groups;
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
    codes[c] = W::kResident ? w.codes + (j0 + c) * code_bytes
                            : panel + c * (w.k_pad / kQBlock) * W::kBlockBytes;
    scales[c] = w.scales + (j0 + c) * n_groups;
  }
  const int8_t* q[MR] = {};
  const float* d[MR] = {};
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    q[r] = x.q + (i0 + r) * x.k_pad;
    d[r] = x.d + (i0 + r) * (x.k_pad / kQBlock);
  }
  __m256 acc[MR][NC];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();

  // Prefetches the scales (and zero terms) of group g onwards, one line per 16 groups.
  const auto prefetch_tables = [&](int64_t g) __attribute__((always_inline)) {
    if (g % 16 != 0) return;
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const int64_t at = (j0 + c) * n_groups + g + table_ahead;
      _mm_prefetch(reinterpret_cast<const char*>(w.scales + at), _MM_HINT_T1);
      if (w.zero_terms != nullptr)
        _mm_prefetch(reinterpret_cast<const char*>(w.zero_terms + at), _MM_HINT_T1);
    }
  };
  // acc += the pair of blocks b, b + 1 (sv[c]: column c's scales in the pair's lanes).
  const auto pair_step = [&](int64_t b, const __m256* sv) __attribute__((always_inline)) {
    typename W::Acts a[MR];
    __m256 dv[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      a[r] = W::acts_pair(q[r] + b * kQBlock);
      dv[r] = pair_scales<W>(d[r] + b);
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const uint8_t* p = codes[c] + b * W::kBlockBytes;
      if constexpr (W::kResident)
        _mm_prefetch(reinterpret_cast<const char*>(p + prefetch_ahead), _MM_HINT_T1);
      const typename W::Codes u = W::codes_pair(p);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m256 dot = _mm256_cvtepi32_ps(W::dot_pair(u, a[r]));
        acc[r][c] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dv[r], sv[c]), acc[r][c]);
      }
    }
  };
  // acc += block b alone (sv[c]: column c's scale of its group, broadcast).
  const auto single_step = [&](int64_t b, const __m256* sv) __attribute__((always_inline)) {
    if constexpr (W::kResident) {
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        _mm_prefetch(reinterpret_cast<const char*>(codes[c] + b * W::kBlockBytes + prefetch_ahead),
                     _MM_HINT_T1);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 dv = _mm256_broadcast_ss(d[r] + b);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const __m256 dot =
            _mm256_cvtepi32_ps(W::dot_single(codes[c] + b * W::kBlockBytes, q[r] + b * kQBlock));
        acc[r][c] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dv, sv[c]), acc[r][c]);
      }
    }
  };

  __m256 sv[NC];
  if (blocks_per_group == 1) {
    // Group 32: the blocks of a pair are consecutive groups, whose scales are adjacent like
    // the blocks' d, so pairs still run whole.
    int64_t b = 0;
    for (; b + 2 <= n_blocks; b += 2) {
      prefetch_tables(b);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) sv[c] = pair_scales<W>(scales[c] + b);
      pair_step(b, sv);
    }
    if (b < n_blocks) {
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) sv[c] = _mm256_broadcast_ss(scales[c] + b);
      single_step(b, sv);
    }
  } else {
    for (int64_t g = 0; g < n_groups; ++g) {
      prefetch_tables(g);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) sv[c] = _mm256_broadcast_ss(scales[c] + g);
      const int64_t b_end = std::min(n_blocks, (g + 1) * blocks_per_group);
      int64_t b = g * blocks_per_group;
      for (; b + 2 <= b_end; b += 2) pair_step(b, sv);
      if (b < b_end) single_step(b, sv);
    }
  }

#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const float* gsum = x.gsum + (i0 + r) * n_groups;
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const int64_t j = j0 + c;
      float v = reduce_add(acc[r][c]);
      if (w.zero_terms != nullptr) {
        v += dot_f32(w.zero_terms + j * n_groups, gsum, n_groups);
      } else if (w.uniform_zero != 0.0f) {
        v -= w.uniform_zero * dot_f32(scales[c], gsum, n_groups);
      }
      if (args.bias != nullptr) v += args.bias[j];
      args.y[(i0 + r) * w.n + j] = v;
    }
  }
}

// Rows [0, m) of columns [j0, j0 + NC) in MR-row tiles (a last partial tile row by row).
template <class W, int MR, int NC>
void column_tile(const QLinearArgs& args, int64_t j0, const uint8_t* panel = nullptr) {
  const int64_t m = args.a->m;
  int64_t i = 0;
  for (; i + MR <= m; i += MR) tile<W, MR, NC>(args, i, j0, panel);
  for (; i < m; ++i) tile<W, 1, NC>(args, i, j0, panel);
}

// Both drivers walk 4-column tiles (the last columns one by one); a tile's codes come from
// DRAM for its first row tile and from L1/L2 for the others, 4 x k / 2 bytes for int4. They
// differ in the register tile, measured on 896 x 4864 (thread CPU time, one thread):
//  - GEMV (decode, small batches): 1 x 4 for m = 1; 2 x 4 from m = 2, so that each unpacked
//    code pair serves two rows (m = 4, int4 g128: 53 GMAC/s with 1 x 4, 58 with 2 x 4);
//  - GEMM: 3 x 4 (12 accumulators); at m = 64, int4 g128 / int8 per channel in GMAC/s:
//    1 x 4 54 / 39, 4 x 2 53 / 41, 2 x 4 60 / 43, 3 x 4 64 / 45. It also unpacks each
//    tile's codes once into a stack panel (int4 to bytes, int8 widened to i16) that its row
//    tiles load instead of unpacking again: m = 128, int4 g128 62 -> 67 GMAC/s, int8 per
//    channel 45 -> 48; 4864 x 896 int4 g32 48 -> 53, int8 g128 32 -> 38. Columns too long
//    for the panel (kPanelBytes: int4 k > 16384, int8 k > 8192) unpack in registers.
constexpr int kTileCols = 4;
constexpr int kGemvRows = 2;
constexpr int kGemmRows = 3;

template <class W, int MR>
void run_tiles(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  int64_t j = n_begin;
  for (; j + kTileCols <= n_end; j += kTileCols) column_tile<W, MR, kTileCols>(args, j);
  for (; j < n_end; ++j) column_tile<W, MR, 1>(args, j);
}

template <class W>
void gemv(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  if (args.a->m == 1) return run_tiles<W, 1>(args, n_begin, n_end);
  run_tiles<W, kGemvRows>(args, n_begin, n_end);
}

// Column j's int4 codes unpacked into `out` (k_pad bytes, Int4Panel's order), prefetching
// as the tile kernel does.
void unpack_int4(const QMatrixView& w, int64_t j, uint8_t* out) {
  const auto code_bytes = static_cast<int64_t>(w.code_bytes_per_column());
  const int64_t ahead = prefetch_columns(code_bytes) * code_bytes;
  const uint8_t* p = w.codes + j * code_bytes;
  const int64_t n_blocks = w.blocks();
  const __m256i mask = _mm256_set1_epi8(0x0F);
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const uint8_t* src = p + b * Int4::kBlockBytes;
    _mm_prefetch(reinterpret_cast<const char*>(src + ahead), _MM_HINT_T1);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + b * kQBlock), _mm256_and_si256(v, mask));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + b * kQBlock + 32),
                       _mm256_and_si256(_mm256_srli_epi16(v, 4), mask));
  }
  if (b < n_blocks) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + b * Int4::kBlockBytes));
    const __m128i m = _mm_set1_epi8(0x0F);
    _mm256_store_si256(
        reinterpret_cast<__m256i*>(out + b * kQBlock),
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m)));
  }
}

// Column j's int8 codes widened to i16 into `out` (2 * k_pad bytes, Int8Panel's order).
void unpack_int8(const QMatrixView& w, int64_t j, uint8_t* out) {
  const auto code_bytes = static_cast<int64_t>(w.code_bytes_per_column());
  const int64_t ahead = prefetch_columns(code_bytes) * code_bytes;
  const uint8_t* p = w.codes + j * code_bytes;
  for (int64_t c = 0; c < w.k_pad; c += 16) {
    if (c % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(p + c + ahead), _MM_HINT_T1);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + 2 * c), Int8::widen_u(p + c));
  }
}

constexpr int64_t kPanelBytes = 64 * 1024;  // the GEMM's stack panel of a column tile

// GEMM: each 4-column tile unpacked once into the panel, then run over every row tile.
template <class Panel, void (*unpack)(const QMatrixView&, int64_t, uint8_t*)>
void gemm_panel(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  using W = typename Panel::Resident;
  const QMatrixView& w = *args.w;
  const int64_t column_bytes = w.k_pad / kQBlock * Panel::kBlockBytes;
  if (kTileCols * column_bytes > kPanelBytes) return run_tiles<W, kGemmRows>(args, n_begin, n_end);
  alignas(32) uint8_t panel[kPanelBytes];
  int64_t j = n_begin;
  for (; j + kTileCols <= n_end; j += kTileCols) {
    for (int c = 0; c < kTileCols; ++c) unpack(w, j + c, panel + c * column_bytes);
    column_tile<Panel, kGemmRows, kTileCols>(args, j, panel);
  }
  for (; j < n_end; ++j) column_tile<W, kGemmRows, 1>(args, j);
}

// ---- activations ----------------------------------------------------------------------
// quantize_acts (kernels/qmatrix.cc) with 8-lane vectors, bit for bit: the same amax (max is
// exact and order-free; vmaxps with the new value first drops NaN as std::max does), the same
// id = 127 / amax and product x * id, rounded by vcvtps2dq (round-half-even, as lrintf under
// the default rounding mode), then truncated to the low byte as the scalar int8 cast does
// (NaN and overflow give 0x80000000 in both, low byte 0).

// The 32 inputs of block b of row xr, permuted, zero past k.
void load_block(const QMatrixView& w, const float* xr, int64_t b, __m256 v[4]) {
  const int64_t c0 = b * kQBlock;
  if (c0 + kQBlock <= w.k) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      v[t] = w.perm != nullptr
                 ? _mm256_i32gather_ps(
                       xr,
                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.perm + c0 + 8 * t)), 4)
                 : _mm256_loadu_ps(xr + c0 + 8 * t);
    }
    return;
  }
  alignas(32) float tail[kQBlock];
  for (int64_t i = 0; i < kQBlock; ++i) {
    const int64_t c = c0 + i;
    tail[i] = c < w.k ? xr[w.perm != nullptr ? w.perm[c] : c] : 0.0f;
  }
  for (int t = 0; t < 4; ++t) v[t] = _mm256_load_ps(tail + 8 * t);
}

}  // namespace

void qlinear_gemv_avx2(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  QS_CHECK(args.w->bits == 4 || args.w->bits == 8);
  if (args.w->bits == 4) return gemv<Int4>(args, n_begin, n_end);
  gemv<Int8>(args, n_begin, n_end);
}

void qlinear_gemm_avx2(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  QS_CHECK(args.w->bits == 4 || args.w->bits == 8);
  if (args.w->bits == 4) return gemm_panel<Int4Panel, unpack_int4>(args, n_begin, n_end);
  gemm_panel<Int8Panel, unpack_int8>(args, n_begin, n_end);
}

QActsView quantize_acts_avx2(const QMatrixView& w, const float* x, int64_t m, void* buf) {
  const int64_t nb = w.blocks();
  const QActsBuffers bufs = qacts_buffers(w, m, buf);
  const QActsView a = bufs.view;
  int8_t* const q = bufs.q;
  float* const d = bufs.d;
  int32_t* const qsum = bufs.qsum;

  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i low_byte = _mm256_set1_epi32(0xFF);
  const __m256i byte_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * w.k;
    for (int64_t b = 0; b < nb; ++b) {
      __m256 v[4];
      load_block(w, xr, b, v);
      __m256 vmax = _mm256_setzero_ps();
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) vmax = _mm256_max_ps(_mm256_and_ps(v[t], abs_mask), vmax);
      const float amax = reduce_max(vmax);
      const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m256i qi[4];
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t)
        qi[t] = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_mul_ps(v[t], id)), low_byte);
      // Bytes 0..255 survive both unsigned packs; the packs interleave 128-bit lanes.
      const __m256i packed = _mm256_permutevar8x32_epi32(
          _mm256_packus_epi16(_mm256_packus_epi32(qi[0], qi[1]), _mm256_packus_epi32(qi[2], qi[3])),
          byte_order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + r * w.k_pad + b * kQBlock), packed);
      const __m256i sum16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), packed);
      qsum[r * nb + b] = reduce_add_i32(_mm256_madd_epi16(sum16, _mm256_set1_epi16(1)));
      d[r * nb + b] = amax / 127.0f;
    }
  }
  qacts_group_sums(w, bufs);
  return a;
}

}  // namespace qs::kernels::cpu
