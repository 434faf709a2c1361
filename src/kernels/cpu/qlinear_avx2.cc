// kernels/cpu: the AVX2 (+FMA, F16C; no VNNI, no AVX-512) quantized linear GEMV over the
// resident layout of kernels/qmatrix.h: unsigned int4/int8 codes times int8 activations,
// integer dot products per 32-input block, scaled and summed in f32, each column's codes
// streamed once for all rows. The GEMM and the quantizer are the Highway ones (qlinear_gemm_hwy.cc,
// qlinear_quantize_hwy.cc) (docs/kernels.md, "Quantized linear kernels"). Compiled with -mavx2
// -mfma -mf16c (file suffix _avx2.cc); no allocation.
#include <immintrin.h>

#include <algorithm>
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
void tile(const QLinearArgs& args, int64_t i0, int64_t j0) {
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
    codes[c] = w.codes + (j0 + c) * code_bytes;
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
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      _mm_prefetch(reinterpret_cast<const char*>(codes[c] + b * W::kBlockBytes + prefetch_ahead),
                   _MM_HINT_T1);
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
void column_tile(const QLinearArgs& args, int64_t j0) {
  const int64_t m = args.a->m;
  int64_t i = 0;
  for (; i + MR <= m; i += MR) tile<W, MR, NC>(args, i, j0);
  for (; i < m; ++i) tile<W, 1, NC>(args, i, j0);
}

// The GEMV walks 4-column tiles (the last columns one by one); a tile's codes come from DRAM
// for its first row tile and from L1/L2 for the others, 4 x k / 2 bytes for int4. Its
// register tile is 1 x 4 for m = 1 and 2 x 4 from m = 2, so that each unpacked code pair
// serves two rows (m = 4, int4 g128, 896 x 4864, one thread: 53 GMAC/s with 1 x 4, 58 with
// 2 x 4).
constexpr int kTileCols = 4;
constexpr int kGemvRows = 2;

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

}  // namespace

// Kept beside qlinear_gemv_hwy.cc's AVX2 GEMV, which measured 0.87-1.19x this one once its
// prefetch followed this one's whole-column rule (one thread, Qwen2.5-0.5B shapes, m = 1 and
// 8, Zen 5, 2026-12-06; docs/kernels.md, "Quantized linear kernels"): level on W8 and
// W4G128 but for down (1.08-1.13x), 1.07-1.19x on every W4G32 row.
void qlinear_gemv_avx2(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  QS_CHECK(args.w->bits == 4 || args.w->bits == 8);
  if (args.w->bits == 4) return gemv<Int4>(args, n_begin, n_end);
  gemv<Int8>(args, n_begin, n_end);
}

}  // namespace qs::kernels::cpu
