// kernels/cpu: the int8-activation GEMV of qlinear_cpu.h (qlinear_hwy()'s gemv: decode and
// small batches, each column's codes streamed once for all m rows) written once in Google
// Highway and compiled for each of its targets (foreach_target.h includes this file again per
// target), over the resident layout of kernels/qmatrix.h. Block dot products are exact in
// int32, so results differ from ref::qlinear_int8 only by f32 summation order. The dot
// products, the only code written per target, and the SCALAR target's loops are
// qlinear_hwy-inl.h's, shared with the GEMM (qlinear_gemm_hwy.cc).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

// As in elementwise_hwy.cc: Zen 4 and Ice Lake report AVX3_DL, opt-in in Highway 1.0.3.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/qlinear_gemv_hwy.cc"
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

void QLinearGemv(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  QS_CHECK(args.w->bits == 4 || args.w->bits == 8);
  scalar_rows(args, n_begin, n_end);
}

#else  // vector targets: at least one 128-bit block per vector

// Per row and step: the activations of the step's blocks arranged to meet the codes (4-bit:
// `lo` holds inputs 0..15 of block i in 128-bit block i and `hi` inputs 16..31, the nibble
// order of the codes; 8-bit: `lo` the first half of the step's bytes, `hi` the second), the
// block scales spread over the int32 lanes each block's dot lands in. Zero points are added
// per output at the end, sum_g zero_term[g] gsum[g] (a uniform zero: -zero sum_g scale[g]
// gsum[g]), as the deleted hand-written AVX2 kernel did: folding a uniform zero into the int32 dots
// instead (-zero * qsum per block, as the AVX-512 one did) cost a multiply, a lane permute
// and a mask per row and step, which the AVX2 target's 32-byte steps felt.

using IndicesF = decltype(hn::SetTableIndices(DF(), static_cast<const int32_t*>(nullptr)));

// acc + factor * t[g] * gs[g] for g < G, in acc's lanes: with t a column's zero terms
// (factor 1), the zero points' share of an output; with its scales and factor -zero, that
// share for a weight with one uniform zero. Summed with the output's own lanes, so an output
// costs one horizontal sum.
HWY_INLINE VF add_group_terms(VF acc, const float* t, const float* gs, int64_t G, float factor) {
  const DF df;
  const int64_t n_lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF f = hn::Set(df, factor);
  int64_t g = 0;
  for (; g + n_lanes <= G; g += n_lanes) {
    acc = hn::MulAdd(hn::Mul(f, hn::LoadU(df, t + g)), hn::LoadU(df, gs + g), acc);
  }
  if (g < G) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    // The tail in one masked step (f32 masked loads are vmaskmovps or AVX-512 masks here,
    // which never fault): as scalar steps it took a fifth of Qwen2.5-0.5B's W4G32 gate/up
    // GEMV at m = 8 (28 groups: 16 + 12 scalar), once per output.
    const auto m = hn::FirstN(df, static_cast<size_t>(G - g));
    acc = hn::MulAdd(hn::Mul(f, hn::MaskedLoad(m, df, t + g)), hn::MaskedLoad(m, df, gs + g), acc);
#else
    HWY_ALIGN float tt[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN float tg[HWY_MAX_BYTES / sizeof(float)] = {};
    for (int64_t i = 0; g + i < G; ++i) {
      tt[i] = t[g + i];
      tg[i] = gs[g + i];
    }
    acc = hn::MulAdd(hn::Mul(f, hn::Load(df, tt)), hn::Load(df, tg), acc);
#endif
  }
  return acc;
}

// 8-bit codes without VNNI: the two dots of a step are added pairwise by 64-bit lanes (each
// 128-bit block then holds two lanes of a lo block and two of a hi block, whose sums are what
// counts), so that one conversion, multiply and FMA serve the step, as the deleted hand-written
// AVX2 kernel paired its blocks; widened dots cost enough that the saved float work shows.
constexpr bool kCombineBytes = !kVnni;

// Where each f32 lane of the lo / hi dots takes its block's value from (lane c of the step
// values): the block scales and group scales the dots are multiplied by.
struct Spread {
  IndicesF lo, hi;
};

template <int kBits>
Spread make_spread() {
  const DF df;
  HWY_ALIGN int32_t lo[kF32Lanes], hi[kF32Lanes], paired[kF32Lanes];
  constexpr auto kHalf = static_cast<int32_t>(kStepBlocks / 2);
  for (size_t i = 0; i < kF32Lanes; ++i) {
    const auto li = static_cast<int32_t>(i);
    // 4-bit: four int32 lanes per block, in both dots. 8-bit: eight (32 bytes) per block,
    // blocks [0, kStepBlocks / 2) in lo and the rest in hi (with one 128-bit block per vector
    // a block spans lo and hi). Paired (kCombineBytes): lanes 2 and 3 of each 128-bit block
    // come from hi.
    lo[i] = kBits == 4 ? li / 4 : li / 8;
    hi[i] = kBits == 4 ? li / 4 : kHalf + li / 8;
    paired[i] = (li / 2) % 2 * kHalf + li / 8;
  }
  constexpr bool kPaired = kBits == 8 && kCombineBytes;
  return {hn::SetTableIndices(df, kPaired ? paired : lo),
          hn::SetTableIndices(df, kPaired ? paired : hi)};
}

// The step's kStepBlocks values at p (block scales, qsums, group scales) in the first lanes
// of every 128-bit block, reading exactly those values.
template <class D>
HWY_INLINE hn::Vec<D> step_values(D d, const hn::TFromD<D>* p) {
  if constexpr (kStepBlocks == 4) {
    return hn::LoadDup128(d, p);
  } else if constexpr (kStepBlocks == 2) {
    uint64_t bits;
    std::memcpy(&bits, p, sizeof(bits));
    return hn::BitCast(d, hn::Set(DU64(), bits));
  } else {
    return hn::Set(d, *p);
  }
}

// The same for a last, partial step: `count` values, the others 0.
template <class D>
HWY_INLINE hn::Vec<D> step_values_partial(D d, const hn::TFromD<D>* p, int64_t count) {
  HWY_ALIGN hn::TFromD<D> tmp[4] = {};
  for (int64_t i = 0; i < count; ++i) tmp[i] = p[i];
  return step_values(d, tmp);
}

struct StepActs {
  Acts lo, hi;
  VF d_lo, d_hi;
};

// kFull: all kStepBlocks blocks of the step are in the row; the last step of a row may not be,
// and is peeled off the loop so that full steps carry no test.
template <int kBits, bool kFull>
HWY_INLINE StepActs load_step(const Spread& sp, const int8_t* q, const float* d, int64_t left) {
  const DF df;
  const DI8 di8;
  // A partial step reads past the row's blocks, still inside the activation buffer (the d,
  // gsum and qsum buffers follow q); those bytes are zeroed, and so are their blocks' d.
  VI8 x0 = hn::LoadU(di8, q);
  VI8 x1 = hn::LoadU(di8, q + kVecBytes);
  VF dv;
  if constexpr (kFull) {
    (void)left;
    dv = step_values(df, d);
  } else {
    const int64_t valid = left * kQBlock;
    x0 = hn::IfThenElseZero(hn::FirstN(di8, static_cast<size_t>(valid)), x0);
    x1 = hn::IfThenElseZero(
        hn::FirstN(di8, static_cast<size_t>(std::max<int64_t>(0, valid - kVecBytes))), x1);
    dv = step_values_partial(df, d, left);
  }
  StepActs s{};  // {}: NEON's implicit constructor would be compiled without its target attribute
  if constexpr (kBits == 4) {
    VI8 lo, hi;
    if constexpr (kStepBlocks == 1) {
      lo = x0;
      hi = x1;
    } else {
      // 128-bit blocks of x0 = [A B ..], x1: the halves of each quantization block.
      const VI8 p = hn::ConcatLowerLower(di8, x1, x0);
      const VI8 u = hn::ConcatUpperUpper(di8, x1, x0);
      if constexpr (kStepBlocks == 2) {
        lo = p;  // [A B] [C D] -> [A C]
        hi = u;  //             -> [B D]
      } else {
        // [A B C D] [E F G H]: p = [A B E F], u = [C D G H] -> [A C E G] and [B D F H].
        lo = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(u), p);
        hi = hn::OddEvenBlocks(u, hn::SwapAdjacentBlocks(p));
      }
    }
    s.lo = prepare(lo);
    s.hi = prepare(hi);
    s.d_lo = s.d_hi = hn::TableLookupLanes(dv, sp.lo);
  } else {
    s.lo = prepare(x0);
    s.hi = prepare(x1);
    s.d_lo = hn::TableLookupLanes(dv, sp.lo);
    s.d_hi = hn::TableLookupLanes(dv, sp.hi);
  }
  return s;
}

// How a step finds its columns' group scales: kGroup, every group is a whole number of steps
// (or there is one group), so one broadcast scale serves the step; kBlocks, one group per block
// (g32), so the step's scales are contiguous, one load (gathering them one by one made
// Qwen2.5-0.5B W4G32 decode 1.2x slower, qlinear_avx512.cc's note); kGather, anything else,
// the step's block scales gathered one by one. Fixed per weight, so a template parameter: a
// test per step and column cost registers the tile needs.
enum class StepScales { kGroup, kBlocks, kGather };

// Group scales of the step's blocks (from block b, group g; sc: the column's scales), spread
// like StepActs::d_lo / d_hi.
template <int kBits, StepScales kScales, bool kFull>
HWY_INLINE void step_scales(const Spread& sp, const float* sc, int64_t bpg, int64_t nb, int64_t b,
                            int64_t g, VF& s_lo, VF& s_hi) {
  const DF df;
  VF s;
  if constexpr (kScales == StepScales::kGroup) {
    s_lo = s_hi = hn::Set(df, sc[g]);
    return;
  } else if constexpr (kScales == StepScales::kBlocks && kFull) {
    s = step_values(df, sc + b);
  } else {
    const int64_t last = std::min(nb - 1, b + kStepBlocks - 1);
    HWY_ALIGN float tmp[4] = {};
    for (int64_t i = 0; i < kStepBlocks; ++i) tmp[i] = sc[std::min(b + i, last) / bpg];
    s = step_values(df, tmp);
  }
  s_lo = hn::TableLookupLanes(s, sp.lo);
  s_hi = kBits == 4 || kCombineBytes ? s_lo : hn::TableLookupLanes(s, sp.hi);
}

// A column's codes are a few hundred bytes to a few KiB, too short a stream for the hardware
// prefetcher to reach full speed before it ends, so every step prefetches into L2 the codes
// this far ahead (a later column tile; columns are contiguous). 16 KiB was the AVX-512
// kernel's measured best on the Qwen2.5-0.5B shapes (8 KiB 14-19 GB/s, 16 KiB 23-28, 32 KiB
// no better). Past the last column the addresses are beyond the codes: prefetches never fault.
constexpr int64_t kPrefetchBytes = kVecBytes >= 64 ? 16 * 1024 : 8 * 1024;
// Columns the kernels compute together: they share each step's activation arrangement, and
// their codes stream side by side.
constexpr int kTileCols = 4;
// Columns stream side by side in tiles of this many.

// How many columns ahead the prefetches point, for columns of `col_bytes` codes: at least
// kPrefetchBytes, in whole columns, and never less than the next column tile. A bare byte
// distance lands inside the tile's own columns, which stream together, once a column is
// longer than a quarter of it: the down projection's 4864-byte W8 columns took 1.9x the hand
// AVX2 kernel's time with 8 KiB, as that kernel's rule (this one) had measured.
inline int64_t prefetch_columns(int64_t col_bytes) {
  return std::max<int64_t>(kTileCols, (kPrefetchBytes + col_bytes - 1) / col_bytes);
}

// What a tile's steps share: per column its codes and scales, per row its activations, the
// code prefetch distance and the accumulators; kept as pointers per column and row, so that a step
// only adds its block offset (indexing from the views per step took the registers the AVX2
// target needs for its accumulators).
template <int MR, int NC>
struct TileRefs {
  const uint8_t* codes[NC];
  const float* scales[NC];
  const int8_t* q[MR];
  const float* d[MR];
  int64_t code_ahead;
  VF acc[MR][NC];
};

// acc += one step at block b (group g), for every row and column of the tile.
template <int kBits, StepScales kScales, int MR, int NC, bool kFull>
HWY_INLINE void tile_step(const Spread& sp, TileRefs<MR, NC>& t, int64_t bpg, int64_t nb, int64_t b,
                          int64_t g) {
  const DF df;
  const DI32 di;
  const DU8 du8;
  const DU16 du16;
  const VU8 nib = hn::Set(du8, 0x0F);
  const int64_t left = nb - b;
  StepActs s[MR]{};
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    s[r] = load_step<kBits, kFull>(sp, t.q[r] + b * kQBlock, t.d[r] + b, left);
  }
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
    const uint8_t* p = t.codes[c] + b * kQBlock * kBits / 8;
    VF s_lo, s_hi;
    step_scales<kBits, kScales, kFull>(sp, t.scales[c], bpg, nb, b, g, s_lo, s_hi);
    // A partial last step reads codes past the column: the next column's, or the scales
    // that follow the codes in the resident buffer; their activations are zero.
    if constexpr (kBits == 4) {
      for (int64_t off = 0; off < kVecBytes; off += 64) prefetch_l2(p + t.code_ahead + off);
      const VU8 v = hn::LoadU(du8, p);
      const VU8 lo = hn::And(v, nib);
      const VU8 hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, v))), nib);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const VI32 dot = dot_nibbles(lo, s[r].lo, hi, s[r].hi, hn::Zero(di));
        t.acc[r][c] = hn::MulAdd(hn::ConvertTo(df, dot), hn::Mul(s[r].d_lo, s_lo), t.acc[r][c]);
      }
    } else {
      for (int64_t off = 0; off < 2 * kVecBytes; off += 64) prefetch_l2(p + t.code_ahead + off);
      const VU8 v0 = hn::LoadU(du8, p);
      const VU8 v1 = hn::LoadU(du8, p + kVecBytes);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const VI32 dot0 = dot_bytes(v0, s[r].lo, hn::Zero(di));
        const VI32 dot1 = dot_bytes(v1, s[r].hi, hn::Zero(di));
        if constexpr (kCombineBytes) {
          const DU64 du64;
          const auto lo64 = hn::BitCast(du64, dot0), hi64 = hn::BitCast(du64, dot1);
          const VI32 dot = hn::Add(hn::BitCast(di, hn::InterleaveLower(du64, lo64, hi64)),
                                   hn::BitCast(di, hn::InterleaveUpper(du64, lo64, hi64)));
          t.acc[r][c] = hn::MulAdd(hn::ConvertTo(df, dot), hn::Mul(s[r].d_lo, s_lo), t.acc[r][c]);
        } else {
          t.acc[r][c] = hn::MulAdd(hn::ConvertTo(df, dot0), hn::Mul(s[r].d_lo, s_lo), t.acc[r][c]);
          t.acc[r][c] = hn::MulAdd(hn::ConvertTo(df, dot1), hn::Mul(s[r].d_hi, s_hi), t.acc[r][c]);
        }
      }
    }
  }
}

// y[i0 .. i0+MR, j0 .. j0+NC): NC columns stream their codes together and each step's codes
// are unpacked once for the MR rows; each step's activations are arranged once for the NC
// columns.
template <int kBits, StepScales kScales, int MR, int NC>
void tile(const Spread& sp, const QLinearArgs& args, int64_t i0, int64_t j0) {
  const DF df;
  const QMatrixView& w = *args.w;
  const QActsView& a = *args.a;
  const int64_t nb = w.blocks(), G = w.n_groups;
  const int64_t bpg = w.group_size / kQBlock;
  const size_t col_bytes = w.code_bytes_per_column();
  TileRefs<MR, NC> t{};  // {}: NEON's implicit constructor would lack its target attribute
  // The scales (and zero terms) of the column whose codes are prefetched, as far ahead, one
  // line (16 groups) at a time: at g32 they are a fifth of the bytes streamed.
  const int64_t cols_ahead = prefetch_columns(static_cast<int64_t>(col_bytes));
  const int64_t table_ahead = cols_ahead * G;
  t.code_ahead = cols_ahead * static_cast<int64_t>(col_bytes);
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
    t.codes[c] = w.codes + static_cast<size_t>(j0 + c) * col_bytes;
    t.scales[c] = w.scales + (j0 + c) * G;
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    t.q[r] = a.q + (i0 + r) * a.k_pad;
    t.d[r] = a.d + (i0 + r) * nb;
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) t.acc[r][c] = hn::Zero(df);
  }
  // Only kGroup reads the group index per step; the others find it at each table prefetch.
  // One group (per channel) never ends, however many blocks it has.
  const int64_t steps_per_group =
      kScales == StepScales::kGroup && G > 1 ? bpg / kStepBlocks : nb + 1;
  const int64_t table_line_blocks = 16 * bpg;
  int64_t next_table_b = G > 1 ? 0 : nb;
  int64_t g = 0, group_steps_left = steps_per_group;
  const int64_t full_end = nb - nb % kStepBlocks;
  for (int64_t b = 0; b < full_end; b += kStepBlocks) {
    if (b >= next_table_b) {
      next_table_b += table_line_blocks;
      const int64_t tg = b / bpg + table_ahead;
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        prefetch_l2(reinterpret_cast<const uint8_t*>(t.scales[c] + tg));
        if (w.zero_terms != nullptr) {
          prefetch_l2(reinterpret_cast<const uint8_t*>(w.zero_terms + (j0 + c) * G + tg));
        }
      }
    }
    tile_step<kBits, kScales, MR, NC, true>(sp, t, bpg, nb, b, g);
    if constexpr (kScales == StepScales::kGroup) {
      if (--group_steps_left == 0) {
        ++g;
        group_steps_left = steps_per_group;
      }
    }
  }
  if (full_end < nb) {
    tile_step<kBits, kScales, MR, NC, false>(sp, t, bpg, nb, full_end, full_end / bpg);
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const float* gsum = a.gsum + (i0 + r) * G;
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const int64_t j = j0 + c;
      VF sum = t.acc[r][c];
      if (w.zero_terms != nullptr) {
        sum = add_group_terms(sum, w.zero_terms + j * G, gsum, G, 1.0f);
      } else if (w.uniform_zero != 0.0f) {
        sum = add_group_terms(sum, t.scales[c], gsum, G, -w.uniform_zero);
      }
      float y = hn::GetLane(hn::SumOfLanes(df, sum));
      if (args.bias != nullptr) y += args.bias[j];
      args.y[(i0 + r) * w.n + j] = y;
    }
  }
}

// Rows of a GEMV tile: two share each step's unpacked codes (more would spill the
// accumulators on AVX-512), a last odd row alone; the codes of the column tile (a few KiB)
// come from L1 after the first row tile.
constexpr int kGemvRows = 2;

// Rows [0, m) of columns [j0, j0 + NC) in MR-row tiles, the last rows one by one.
template <int kBits, StepScales kScales, int MR, int NC>
void column_tile(const Spread& sp, const QLinearArgs& args, int64_t j0) {
  const int64_t m = args.a->m;
  int64_t i = 0;
  for (; i + MR <= m; i += MR) tile<kBits, kScales, MR, NC>(sp, args, i, j0);
  for (; i < m; ++i) tile<kBits, kScales, 1, NC>(sp, args, i, j0);
}

template <int kBits, StepScales kScales, int MR>
void run_tiles(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  const Spread sp = make_spread<kBits>();
  int64_t j = n_begin;
  for (; j + kTileCols <= n_end; j += kTileCols) {
    column_tile<kBits, kScales, MR, kTileCols>(sp, args, j);
  }
  for (; j < n_end; ++j) column_tile<kBits, kScales, MR, 1>(sp, args, j);
}

template <int kBits, int MR>
void dispatch_scales(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  const QMatrixView& w = *args.w;
  if (w.n_groups == 1 || w.group_size % (kStepBlocks * kQBlock) == 0) {
    run_tiles<kBits, StepScales::kGroup, MR>(args, n_begin, n_end);
  } else if (w.group_size == kQBlock) {
    run_tiles<kBits, StepScales::kBlocks, MR>(args, n_begin, n_end);
  } else {
    run_tiles<kBits, StepScales::kGather, MR>(args, n_begin, n_end);
  }
}

template <int MR>
void dispatch(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  if (args.w->bits == 4) return dispatch_scales<4, MR>(args, n_begin, n_end);
  QS_CHECK(args.w->bits == 8);
  dispatch_scales<8, MR>(args, n_begin, n_end);
}

void QLinearGemv(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  dispatch<kGemvRows>(args, n_begin, n_end);
}

#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace qs::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qs::kernels::cpu {

HWY_EXPORT(QLinearGemv);

decltype(QLinearKernels::gemv) qlinear_gemv_hwy(int64_t target) {
  return hwy_table_entry(HWY_DISPATCH_TABLE(QLinearGemv), target,
                         "not a target qlinear_gemv_hwy.cc is compiled for");
}

}  // namespace qs::kernels::cpu
#endif  // HWY_ONCE
