// kernels/cpu: the int8-activation GEMM of qlinear_cpu.h (qlinear_hwy()'s gemm: prefill, m >=
// kQGemmMinRows; a panel of columns unpacked once and reused over all rows) written once in
// Google Highway and compiled for each of its targets (foreach_target.h includes this file
// again per target), over the resident layout of kernels/qmatrix.h. Block dot products are
// exact in int32, so results differ from ref::qlinear_int8 only by f32 summation order. The
// dot products, the only code written per target, and the SCALAR target's loops are
// qlinear_hwy-inl.h's, shared with the GEMV (qlinear_gemv_hwy.cc).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

// As in elementwise_hwy.cc: Zen 4 and Ice Lake report AVX3_DL, opt-in in Highway 1.0.3.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/qlinear_gemm_hwy.cc"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "core/check.h"
#include "kernels/cpu/hwy_targets.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/cpu/qlinear_hwy-inl.h"  // before HWY_BEFORE_NAMESPACE: AVX3_DL's target string

HWY_BEFORE_NAMESPACE();
namespace qs::kernels::cpu {
namespace HWY_NAMESPACE {
namespace {

#if HWY_TARGET == HWY_SCALAR

void QLinearGemm(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  QS_CHECK(args.w->bits == 4 || args.w->bits == 8);
  scalar_rows(args, n_begin, n_end);
}

#else  // vector targets: at least one 128-bit block per vector

// The hand-written AVX-512 GEMM's design on every width: a panel of two vectors of columns
// (32 on AVX-512, 16 on AVX2, 8 on 128-bit targets) is unpacked, a chunk of blocks at a time,
// into [block][input quad][column] u8x4 words, so that one dot multiplies 4 inputs of a
// vector of columns by 4 activations of one row broadcast to every lane. The panel is
// unpacked once per call and reused by every row tile, and each row's block needs one
// int -> float conversion per vector of columns instead of one per column.

constexpr int64_t kPanelCols = 2 * static_cast<int64_t>(kF32Lanes);
constexpr int64_t kChunkBlocks = 16;  // AVX-512: 16 blocks x 32 columns x 32 bytes = 16 KiB
constexpr int64_t kQuads = kQBlock / 4;

// How a panel word meets a broadcast activation quad: vpdpbusd; on AVX3 / AVX2 maddubs into
// i16 over a whole block, which cannot saturate on nibbles (8 quads x 2 x 15 x 128 = 30720,
// also for -128 activations), so 8-bit codes are unpacked as two nibble panels, u = 16 hi +
// lo (widening them to i16 instead measured 1.4x the hand-written AVX2 GEMM, which widens its
// panel once); elsewhere both widened to i16, as dot_widened does.
enum class PanelDot { kDpbusd, kMaddubs, kWidened };
constexpr PanelDot kPanelDot = kVnni ? PanelDot::kDpbusd
                               : HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2
                                   ? PanelDot::kMaddubs
                                   : PanelDot::kWidened;
// Panel words per quad of a block and column: two (low and high nibbles) for 8-bit codes
// under maddubs.
template <int kBits>
constexpr int64_t kSplits = kBits == 8 && kPanelDot == PanelDot::kMaddubs ? 2 : 1;
// Rows of a GEMM tile: 6 x 2 accumulators and 6 x 2 dots fill AVX-512's 32 registers, as in
// the hand-written kernel; 16-register targets take 4, or 3 with two nibble panels.
template <int kBits>
constexpr int kGemmRows = HWY_ARCH_X86&& HWY_TARGET <= HWY_AVX3 ? 6
                          : kSplits<kBits> == 2                 ? 3
                                                                : 4;

// 4x4 transpose of the 32-bit words inside each 128-bit block of v[0..3].
HWY_INLINE void transpose_words(VI32* v) {
  const DI32 di;
  const DU64 du64;
  const VI32 t0 = hn::InterleaveLower(di, v[0], v[1]), t1 = hn::InterleaveUpper(di, v[0], v[1]);
  const VI32 t2 = hn::InterleaveLower(di, v[2], v[3]), t3 = hn::InterleaveUpper(di, v[2], v[3]);
  const auto lo = [&](VI32 a, VI32 b) {
    return hn::BitCast(di, hn::InterleaveLower(du64, hn::BitCast(du64, a), hn::BitCast(du64, b)));
  };
  const auto hi = [&](VI32 a, VI32 b) {
    return hn::BitCast(di, hn::InterleaveUpper(du64, hn::BitCast(du64, a), hn::BitCast(du64, b)));
  };
  v[0] = lo(t0, t2);
  v[1] = hi(t0, t2);
  v[2] = lo(t1, t3);
  v[3] = hi(t1, t3);
}

// Transpose of the 128-bit blocks of x[0 .. kStepBlocks): block i of result i' is block i'
// of x[i].
HWY_INLINE void transpose_blocks(VI32* x) {
  const DI32 di;
  if constexpr (kStepBlocks == 4) {
    const VI32 a = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(x[1]), x[0]);
    const VI32 b = hn::OddEvenBlocks(x[1], hn::SwapAdjacentBlocks(x[0]));
    const VI32 c = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(x[3]), x[2]);
    const VI32 d = hn::OddEvenBlocks(x[3], hn::SwapAdjacentBlocks(x[2]));
    x[0] = hn::ConcatLowerLower(di, c, a);
    x[1] = hn::ConcatLowerLower(di, d, b);
    x[2] = hn::ConcatUpperUpper(di, c, a);
    x[3] = hn::ConcatUpperUpper(di, d, b);
  } else if constexpr (kStepBlocks == 2) {
    const VI32 a = hn::ConcatLowerLower(di, x[1], x[0]);
    x[1] = hn::ConcatUpperUpper(di, x[1], x[0]);
    x[0] = a;
  }
}

// Blocks [b0, b0 + nbk) of columns [j0, j0 + nc) into panel[block][quad][kPanelCols]: per
// half of the panel, a vector of bytes from each of its columns, transposed as words (within
// 128-bit blocks, then the blocks), gives per word of the loaded bytes a vector of columns.
// 4-bit: word t of a block holds quad t in its low nibbles and quad t + 4 in its high ones.
// 8-bit under maddubs: each quad's low nibbles, then its high ones.
template <int kBits>
void unpack_panel(const QMatrixView& w, int64_t j0, int64_t nc, int64_t b0, int64_t nbk,
                  int32_t* panel) {
  const DI32 di;
  const DU8 du8;
  constexpr int64_t kBlockBytes = kQBlock * kBits / 8;
  const auto col_bytes = static_cast<int64_t>(w.code_bytes_per_column());
  const int64_t start = b0 * kBlockBytes, chunk_bytes = nbk * kBlockBytes;
  const VI32 nib = hn::Set(di, 0x0F0F0F0F);
  for (int64_t half = 0; half < 2; ++half) {
    for (int64_t off = 0; off < chunk_bytes; off += kVecBytes) {
      VI32 x[kF32Lanes];
      for (size_t c = 0; c < kF32Lanes; ++c) {
        const int64_t col = half * static_cast<int64_t>(kF32Lanes) + static_cast<int64_t>(c);
        const uint8_t* at = w.codes + (j0 + col) * col_bytes + start + off;
        prefetch_l2(at + kPanelCols * col_bytes);
        if (col >= nc) {
          x[c] = hn::Zero(di);
        } else if (start + off + kVecBytes <= col_bytes) {
          x[c] = hn::BitCast(di, hn::LoadU(du8, at));
        } else {
          // The column's last bytes, short of a vector: the matrix's last column may end
          // its buffer.
          HWY_ALIGN uint8_t tail[kVecBytes] = {};
          std::memcpy(tail, at, static_cast<size_t>(col_bytes - start - off));
          x[c] = hn::BitCast(di, hn::Load(du8, tail));
        }
      }
      // x[4Q + t]: word t of each 128-bit block of columns 4Q .. 4Q + 3, then block i of
      // x[kStepBlocks * t + i] ... after the block transpose: word t of the loaded bytes'
      // block i, for all the half's columns in order.
      for (size_t q = 0; q < kStepBlocks; ++q) transpose_words(x + 4 * q);
      for (size_t t = 0; t < 4; ++t) {
        VI32 y[kStepBlocks];
        for (size_t q = 0; q < kStepBlocks; ++q) y[q] = x[4 * q + t];
        transpose_blocks(y);
        for (size_t i = 0; i < kStepBlocks; ++i) {
          const auto word = static_cast<int64_t>(4 * i + t);  // word of the loaded bytes
          if constexpr (kBits == 4) {
            const int64_t blk = off / kBlockBytes + static_cast<int64_t>(i);
            int32_t* p = panel + (blk * kQuads + word % 4) * kPanelCols + half * kF32Lanes;
            hn::Store(hn::And(y[i], nib), di, p);
            hn::Store(hn::And(hn::ShiftRight<4>(y[i]), nib), di, p + 4 * kPanelCols);
          } else {
            const int64_t quad = off / 4 + word;  // blk * kQuads + quad in block
            int32_t* p = panel + quad * kSplits<kBits> * kPanelCols + half * kF32Lanes;
            if constexpr (kSplits<kBits> == 2) {
              hn::Store(hn::And(y[i], nib), di, p);
              hn::Store(hn::And(hn::ShiftRight<4>(y[i]), nib), di, p + kPanelCols);
            } else {
              hn::Store(y[i], di, p);
            }
          }
        }
      }
    }
  }
}

// The first `count` lanes of p (count may be <= 0 or past a vector); the rest 0.
HWY_INLINE VF load_cols(const float* p, int64_t count) {
  const DF df;
  if (count >= static_cast<int64_t>(kF32Lanes)) return hn::LoadU(df, p);
  HWY_ALIGN float t[kF32Lanes] = {};
  for (int64_t i = 0; i < count; ++i) t[i] = p[i];
  return hn::Load(df, t);
}

HWY_INLINE void store_cols(VF v, float* p, int64_t count) {
  const DF df;
  if (count >= static_cast<int64_t>(kF32Lanes)) {
    hn::StoreU(v, df, p);
    return;
  }
  HWY_ALIGN float t[kF32Lanes];
  hn::Store(v, df, t);
  for (int64_t i = 0; i < count; ++i) p[i] = t[i];
}

// Groups [g_first, g_first + ng) of `src` ([n, n_groups], scales or zero terms) for the
// panel's columns, into tab[group][2 * kPanelCols] at `offset`, one gather per group and
// vector of columns (columns past nc read column j0's).
void gather_tables(const QMatrixView& w, const float* src, int64_t j0, int64_t nc, int64_t g_first,
                   int64_t ng, int64_t offset, float* tab) {
  const DF df;
  const DI32 di;
  HWY_ALIGN int32_t idx[kPanelCols];
  for (int64_t c = 0; c < kPanelCols; ++c) {
    idx[c] = static_cast<int32_t>((c < nc ? c : 0) * w.n_groups);
  }
  const VI32 i0 = hn::Load(di, idx), i1 = hn::Load(di, idx + kF32Lanes);
  for (int64_t g = 0; g < ng; ++g) {
    const float* base = src + j0 * w.n_groups + g_first + g;
    float* t = tab + g * 2 * kPanelCols + offset;
    hn::Store(hn::GatherIndex(df, base, i0), df, t);
    hn::Store(hn::GatherIndex(df, base, i1), df, t + kF32Lanes);
  }
}

// The i32 lanes of a broadcast activation quad q[0..3]: the bytes (vpdpbusd, maddubs), or
// as dot_widened takes them, the even bytes (q0, q2) and the odd ones (q1, q3) as i16.
// [[maybe_unused]]: the widened targets call quad_i16 alone, and clang flags a file-local
// function that a target of the file does not call.
[[maybe_unused]] HWY_INLINE VI32 quad_bytes(const int8_t* q) {
  int32_t q4;
  std::memcpy(&q4, q, 4);
  return hn::Set(DI32(), q4);
}
HWY_INLINE VI16 quad_i16(int8_t a, int8_t b) {
  const auto bits = static_cast<int32_t>(static_cast<uint16_t>(static_cast<int16_t>(a)) |
                                         (static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16));
  return hn::BitCast(DI16(), hn::Set(DI32(), bits));
}

// y[r0 .. r0 + R, panel] += the chunk's share. `tables`: per group of the chunk, kPanelCols
// scales then kPanelCols zero terms (these only with a zero-term table). A uniform zero is
// folded into each block's int32 dot instead: it starts at -zero * qsum, exact, which spares
// a float pass per group and row.
template <int kBits, int R>
void gemm_rows(const QLinearArgs& args, const int32_t* panel, const float* tables, int64_t g_first,
               int64_t j0, int64_t nc, int64_t b0, int64_t nbk, int64_t r0, bool first_chunk) {
  const DF df;
  const DI32 di;
  const DI16 di16;
  const DU16 du16;
  constexpr PanelDot kDot = kPanelDot;
  constexpr int64_t kQuadWords = kSplits<kBits> * kPanelCols;
  const QMatrixView& w = *args.w;
  const QActsView& a = *args.a;
  const int64_t nb = w.blocks();
  const int64_t bpg = w.group_size / kQBlock;
  const bool zero_table = w.zero_terms != nullptr;
  const int32_t neg_zero = zero_table ? 0 : -static_cast<int32_t>(w.uniform_zero);
  const int64_t n_hi = nc - static_cast<int64_t>(kF32Lanes);
  VF acc[R][2];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const float* src = first_chunk ? args.bias : args.y + (r0 + i) * w.n;
    if (src == nullptr) {
      acc[i][0] = acc[i][1] = hn::Zero(df);
    } else {
      acc[i][0] = load_cols(src + j0, nc);
      acc[i][1] = load_cols(src + j0 + kF32Lanes, n_hi);
    }
  }
  for (int64_t blk = 0; blk < nbk; ++blk) {
    const int64_t b = b0 + blk;
    const int64_t g = b / bpg;
    const float* tab = tables + (g - g_first) * 2 * kPanelCols;
    if (zero_table && b % bpg == 0) {
      // First block of group g: add its zero terms once.
      const VF z0 = hn::Load(df, tab + kPanelCols), z1 = hn::Load(df, tab + kPanelCols + kF32Lanes);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const VF gs = hn::Set(df, a.gsum[(r0 + i) * w.n_groups + g]);
        acc[i][0] = hn::MulAdd(z0, gs, acc[i][0]);
        acc[i][1] = hn::MulAdd(z1, gs, acc[i][1]);
      }
    }
    const int32_t* pw = panel + blk * kQuads * kQuadWords;
    const int8_t* q[R];
    VI32 dot[R][2];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      q[i] = a.q + (r0 + i) * a.k_pad + b * kQBlock;
      dot[i][0] = dot[i][1] = hn::Set(di, neg_zero * a.qsum[(r0 + i) * nb + b]);
    }
    if constexpr (kDot == PanelDot::kMaddubs) {
      // s[i][k][h]: row i, vector k of columns, nibble h (8-bit: low, high).
      VI16 s[R][2][kSplits<kBits>];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
        for (int k = 0; k < 2; ++k)
#pragma GCC unroll 2
          for (int64_t h = 0; h < kSplits<kBits>; ++h) s[i][k][h] = hn::Zero(di16);
#pragma GCC unroll 8
      for (int64_t t = 0; t < kQuads; ++t) {
        VI32 wv[2][kSplits<kBits>];
#pragma GCC unroll 2
        for (int k = 0; k < 2; ++k)
#pragma GCC unroll 2
          for (int64_t h = 0; h < kSplits<kBits>; ++h)
            wv[k][h] = hn::Load(di, pw + t * kQuadWords + h * kPanelCols + k * kF32Lanes);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const VI32 qb = quad_bytes(q[i] + 4 * t);
#pragma GCC unroll 2
          for (int k = 0; k < 2; ++k)
#pragma GCC unroll 2
            for (int64_t h = 0; h < kSplits<kBits>; ++h)
              s[i][k][h] = dot_pairs(s[i][k][h], wv[k][h], qb);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
        for (int k = 0; k < 2; ++k) {
          dot[i][k] = hn::Add(dot[i][k], widen_pairs(s[i][k][0], 1));
          if constexpr (kSplits<kBits> == 2) {
            dot[i][k] = hn::Add(dot[i][k], widen_pairs(s[i][k][1], 16));
          }
        }
      }
    } else {
#pragma GCC unroll 8
      for (int64_t t = 0; t < kQuads; ++t) {
        const VI32 w0 = hn::Load(di, pw + t * kPanelCols);
        const VI32 w1 = hn::Load(di, pw + t * kPanelCols + kF32Lanes);
        if constexpr (kDot == PanelDot::kDpbusd) {
#pragma GCC unroll 8
          for (int i = 0; i < R; ++i) {
            const VI32 qb = quad_bytes(q[i] + 4 * t);
            dot[i][0] = dot_quad(dot[i][0], w0, qb);
            dot[i][1] = dot_quad(dot[i][1], w1, qb);
          }
        } else {
          // The codes' even and odd bytes widened once for the R rows.
          const VI16 mask = hn::Set(di16, 0x00FF);
          const VI16 e0 = hn::And(hn::BitCast(di16, w0), mask);
          const VI16 o0 = hn::BitCast(di16, hn::ShiftRight<8>(hn::BitCast(du16, w0)));
          const VI16 e1 = hn::And(hn::BitCast(di16, w1), mask);
          const VI16 o1 = hn::BitCast(di16, hn::ShiftRight<8>(hn::BitCast(du16, w1)));
#pragma GCC unroll 8
          for (int i = 0; i < R; ++i) {
            const int8_t* qi = q[i] + 4 * t;
            const VI16 qe = quad_i16(qi[0], qi[2]), qo = quad_i16(qi[1], qi[3]);
            dot[i][0] = dot_widened_split(e0, o0, qe, qo, dot[i][0]);
            dot[i][1] = dot_widened_split(e1, o1, qe, qo, dot[i][1]);
          }
        }
      }
    }
    const VF s0 = hn::Load(df, tab), s1 = hn::Load(df, tab + kF32Lanes);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const VF d = hn::Set(df, a.d[(r0 + i) * nb + b]);
      acc[i][0] = hn::MulAdd(hn::ConvertTo(df, dot[i][0]), hn::Mul(d, s0), acc[i][0]);
      acc[i][1] = hn::MulAdd(hn::ConvertTo(df, dot[i][1]), hn::Mul(d, s1), acc[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    float* y = args.y + (r0 + i) * w.n + j0;
    store_cols(acc[i][0], y, nc);
    store_cols(acc[i][1], y + kF32Lanes, n_hi);
  }
}

// The last rows < kGemmRows<kBits> of a panel chunk, in one tile.
template <int kBits, int R>
void gemm_tail(const QLinearArgs& args, const int32_t* panel, const float* tables, int64_t g_first,
               int64_t j0, int64_t nc, int64_t b0, int64_t nbk, int64_t r0, bool first_chunk,
               int64_t rows) {
  if constexpr (R > 0) {
    if (rows == R) {
      gemm_rows<kBits, R>(args, panel, tables, g_first, j0, nc, b0, nbk, r0, first_chunk);
    } else {
      gemm_tail<kBits, R - 1>(args, panel, tables, g_first, j0, nc, b0, nbk, r0, first_chunk, rows);
    }
  }
}

template <int kBits>
void gemm(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  const QMatrixView& w = *args.w;
  const QActsView& a = *args.a;
  const int64_t nb = w.blocks();
  const int64_t bpg = w.group_size / kQBlock;
  HWY_ALIGN int32_t panel[kChunkBlocks * kQuads * kSplits<kBits> * kPanelCols];
  // A chunk touches at most kChunkBlocks groups (groups are at least one block).
  HWY_ALIGN float tables[kChunkBlocks * 2 * kPanelCols];
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kPanelCols) {
    const int64_t nc = std::min(kPanelCols, n_end - j0);
    // The next panel's scales (and zero terms), contiguous, into L2, as unpack_panel does
    // for its codes.
    for (const float* t : {w.scales, w.zero_terms}) {
      if (t == nullptr) continue;
      const auto* next = reinterpret_cast<const uint8_t*>(t + (j0 + kPanelCols) * w.n_groups);
      for (int64_t off = 0; off < kPanelCols * w.n_groups * 4; off += 64) prefetch_l2(next + off);
    }
    for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
      const int64_t nbk = std::min(kChunkBlocks, nb - b0);
      unpack_panel<kBits>(w, j0, nc, b0, nbk, panel);
      const int64_t g_first = b0 / bpg, ng = (b0 + nbk - 1) / bpg - g_first + 1;
      gather_tables(w, w.scales, j0, nc, g_first, ng, 0, tables);
      if (w.zero_terms != nullptr) {
        gather_tables(w, w.zero_terms, j0, nc, g_first, ng, kPanelCols, tables);
      }
      const bool first = b0 == 0;
      int64_t r0 = 0;
      for (; r0 + kGemmRows<kBits> <= a.m; r0 += kGemmRows<kBits>) {
        gemm_rows<kBits, kGemmRows<kBits> >(args, panel, tables, g_first, j0, nc, b0, nbk, r0,
                                            first);
      }
      gemm_tail<kBits, kGemmRows<kBits> - 1>(args, panel, tables, g_first, j0, nc, b0, nbk, r0,
                                             first, a.m - r0);
    }
  }
}

void QLinearGemm(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  if (args.w->bits == 4) {
    gemm<4>(args, n_begin, n_end);
  } else {
    QS_CHECK(args.w->bits == 8);
    gemm<8>(args, n_begin, n_end);
  }
}

#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace qs::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qs::kernels::cpu {

HWY_EXPORT(QLinearGemm);

decltype(QLinearKernels::gemm) qlinear_gemm_hwy(int64_t target) {
  return hwy_table_entry(HWY_DISPATCH_TABLE(QLinearGemm), target,
                         "not a target qlinear_gemm_hwy.cc is compiled for");
}

}  // namespace qs::kernels::cpu
#endif  // HWY_ONCE
