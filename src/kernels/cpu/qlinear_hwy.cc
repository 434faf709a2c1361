// kernels/cpu: the int8-activation quantized linear kernels of qlinear_cpu.h (GEMV, GEMM,
// quantize_acts) written once in Google Highway and compiled for each of its targets
// (foreach_target.h includes this file again per target), over the resident layout of
// kernels/qmatrix.h. Block dot products are exact in int32, so results differ from
// ref::qlinear_int8 only by f32 summation order; quantize_acts is bit for bit the scalar one.
// Per target (Highway 1.0.3 has no such ops) are only the u8 x s8 dot products: vpdpbusd on
// AVX3_DL, maddubs + madd on AVX3/AVX2 (for 8-bit codes, the GEMM's nibble panels; the GEMV
// widens them), and elsewhere both operands widened to i16 for ReorderWidenMulAccumulate; and
// quantize_acts' x86 conversion and AVX2 byte pack. The one-lane SCALAR target runs the same
// sums in plain loops.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

// As in elementwise_hwy.cc: Zen 4 and Ice Lake report AVX3_DL, opt-in in Highway 1.0.3.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/qlinear_hwy.cc"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "core/check.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/qlinear_cpu.h"

// Highway 1.0.3's AVX3_DL attributes name AVX-VNNI but not AVX512-VNNI, which vpdpbusd on
// zmm needs; every CPU Highway runs AVX3_DL on has it (its CPUID check requires VNNI). So this
// file's AVX3_DL code gets Highway's list (set_macros-inl.h) plus avx512vnni: redefined before
// HWY_BEFORE_NAMESPACE, which pushes it as GCC's target pragma or clang's attribute (a
// `#pragma GCC target` alone is ignored by clang). set_macros-inl.h defines it afresh for each
// target.
#if HWY_TARGET == HWY_AVX3_DL
#undef HWY_TARGET_STR
#define HWY_TARGET_STR                                            \
  HWY_TARGET_STR_AVX3                                             \
  ",vpclmulqdq,avx512vbmi,avx512vbmi2,vaes,avxvnni,avx512bitalg," \
  "avx512vpopcntdq,avx512vnni"
#endif
HWY_BEFORE_NAMESPACE();
namespace qs::kernels::cpu {
namespace HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI32 = hn::ScalableTag<int32_t>;
using VF = hn::Vec<DF>;
using VI32 = hn::Vec<DI32>;

// ---------------------------------------------------------------------------------------
// quantize_acts, bit for bit: the same amax (max is exact and order-free; NaN is dropped, as
// std::max(amax, NaN) drops it), the same id = 127 / amax and product x * id, rounded half to
// even, then the low byte kept as the scalar int8 cast keeps it. Products past int32 (NaN, or
// inf where 127 / amax overflowed) are 0x80000000 from the scalar lrintf on x86, low byte 0.
// (On AArch64, lrintf saturates +inf to a low byte of 0xFF instead: that scalar differs
// there, on such blocks only.)

// The max / sum of v's lanes as a scalar: halves first (one op each), then Highway's reduction
// within 128 bits (its whole-vector reductions also broadcast the result to every lane).
template <class D>
HWY_INLINE hn::TFromD<D> max_lanes(D d, hn::Vec<D> v) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (hn::MaxLanes(D()) * sizeof(hn::TFromD<D>) > 16) {
    const hn::Half<D> dh;
    return max_lanes(dh, hn::Max(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else  // NOLINT
#endif
  {
    return hn::GetLane(hn::MaxOfLanes(d, v));
  }
}
template <class D>
HWY_INLINE hn::TFromD<D> sum_lanes(D d, hn::Vec<D> v) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (hn::MaxLanes(D()) * sizeof(hn::TFromD<D>) > 16) {
    const hn::Half<D> dh;
    return sum_lanes(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else  // NOLINT
#endif
  {
    return hn::GetLane(hn::SumOfLanes(d, v));
  }
}

#if HWY_TARGET != HWY_SCALAR
// The low bytes of q[0 .. 4), in order, as one vector: the words halved twice, portably;
// on AVX2 masked and packed with saturation instead (the hand-written quantizer's 8 ops
// where the two halvings take 12, which left it 1.13-1.18x that one's time).
HWY_INLINE hn::Vec<hn::ScalableTag<uint8_t>> low_bytes4(const VI32* q) {
#if HWY_TARGET == HWY_AVX2
  const __m256i m = _mm256_set1_epi32(0xFF);
  const __m256i p01 =
      _mm256_packus_epi32(_mm256_and_si256(q[0].raw, m), _mm256_and_si256(q[1].raw, m));
  const __m256i p23 =
      _mm256_packus_epi32(_mm256_and_si256(q[2].raw, m), _mm256_and_si256(q[3].raw, m));
  // The packs interleave 128-bit lanes.
  return hn::Vec<hn::ScalableTag<uint8_t>>{_mm256_permutevar8x32_epi32(
      _mm256_packus_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))};
#else
  const hn::ScalableTag<uint16_t> du16;
  const hn::ScalableTag<uint8_t> du8;
  const auto h01 = hn::ConcatEven(du16, hn::BitCast(du16, q[1]), hn::BitCast(du16, q[0]));
  const auto h23 = hn::ConcatEven(du16, hn::BitCast(du16, q[3]), hn::BitCast(du16, q[2]));
  return hn::ConcatEven(du8, hn::BitCast(du8, h23), hn::BitCast(du8, h01));
#endif
}
#endif

// Stores the low bytes of a block's words q[0 .. kVecs) at out, in order, and returns their
// sum as int8, summing the bytes unsigned (SumsOf8) offset by 128. (Highway 1.0.3's
// TruncateTo to bytes permutes dwords instead of bytes on AVX3_DL.)
template <size_t kVecs>
HWY_INLINE int32_t store_low_bytes(const VI32* q, int8_t* out) {
#if HWY_TARGET == HWY_SCALAR
  const hn::Rebind<int8_t, DI32> di8q;
  int32_t sum = 0;
  for (size_t t = 0; t < kVecs; ++t) {
    const VI32 s = hn::ShiftRight<24>(hn::ShiftLeft<24>(q[t]));
    hn::StoreU(hn::DemoteTo(di8q, s), di8q, out + t);
    sum += hn::GetLane(s);
  }
  return sum;
#else
  constexpr int32_t kOffset = 128 * static_cast<int32_t>(kQBlock);
  if constexpr (kVecs == 2) {
    // AVX-512: one vector of the words' low halves, narrowed to half a vector of bytes.
    const hn::ScalableTag<uint16_t> du16;
    const hn::Rebind<uint8_t, decltype(du16)> du8h;
    const hn::Repartition<uint64_t, decltype(du8h)> du64h;
    const auto h = hn::ConcatEven(du16, hn::BitCast(du16, q[1]), hn::BitCast(du16, q[0]));
    const auto bytes = hn::DemoteTo(
        du8h, hn::BitCast(hn::ScalableTag<int16_t>(), hn::And(h, hn::Set(du16, uint16_t{0xFF}))));
    hn::StoreU(bytes, du8h, reinterpret_cast<uint8_t*>(out));
    return static_cast<int32_t>(
               sum_lanes(du64h, hn::SumsOf8(hn::Xor(bytes, hn::Set(du8h, 0x80))))) -
           kOffset;
  } else {
    const hn::ScalableTag<uint8_t> du8;
    const hn::ScalableTag<uint64_t> du64;
    hn::Vec<decltype(du64)> sums = hn::Zero(du64);
#pragma GCC unroll 8
    for (size_t i = 0; i < kVecs / 4; ++i) {
      const auto bytes = low_bytes4(q + 4 * i);
      hn::StoreU(bytes, du8, reinterpret_cast<uint8_t*>(out) + i * hn::MaxLanes(du8));
      sums = hn::Add(sums, hn::SumsOf8(hn::Xor(bytes, hn::Set(du8, 0x80))));
    }
    return static_cast<int32_t>(sum_lanes(du64, sums)) - kOffset;
  }
#endif
}

// Words whose low byte is lrintf(p)'s. On x86, cvtps2dq, the instruction lrintf is there
// (rounding half to even; NaN and out of range give 0x80000000, low byte 0); Highway's
// NearestInt would add three ops to saturate instead. Elsewhere round(p) + 1.5 * 2^23: exact
// for |round(p)| < 2^22 with round(p) in its low mantissa bits, and NaN and +-inf have a low
// byte of 0 there too. Rounding first, not adding to p, keeps the add from being fused with
// the multiply, which would round once where the scalar rounds twice.
HWY_INLINE VI32 rounded_bits(VF p) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return VI32{_mm512_cvtps_epi32(p.raw)};
#elif HWY_TARGET == HWY_AVX2
  return VI32{_mm256_cvtps_epi32(p.raw)};
#elif HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  return VI32{_mm_cvtps_epi32(p.raw)};
#else
  const DF df;
  return hn::BitCast(DI32(), hn::Add(hn::Round(p), hn::Set(df, 12582912.0f)));
#endif
}

QActsView QLinearQuantizeActs(const QMatrixView& w, const float* x, int64_t m, void* buf) {
  const DF df;
  const DI32 di;
  constexpr size_t kLanes = hn::MaxLanes(DF());
  static_assert(kQBlock % kLanes == 0, "a block is whole vectors");
  constexpr size_t kVecs = kQBlock / kLanes;
  constexpr int32_t kInfBits = 0x7F800000;
  const int64_t nb = w.blocks();
  const QActsBuffers bufs = qacts_buffers(w, m, buf);
  const VI32 abs_mask = hn::Set(di, 0x7FFFFFFF);
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * w.k;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * kQBlock;
      VF v[kVecs];
      if (c0 + kQBlock <= w.k) {
#pragma GCC unroll 8
        for (size_t t = 0; t < kVecs; ++t) {
          v[t] = w.perm != nullptr
                     ? hn::GatherIndex(df, xr, hn::LoadU(di, w.perm + c0 + t * kLanes))
                     : hn::LoadU(df, xr + c0 + t * kLanes);
        }
      } else {
        HWY_ALIGN float tail[kQBlock];
        for (int64_t i = 0; i < kQBlock; ++i) {
          const int64_t c = c0 + i;
          tail[i] = c < w.k ? xr[w.perm != nullptr ? w.perm[c] : c] : 0.0f;
        }
#pragma GCC unroll 8
        for (size_t t = 0; t < kVecs; ++t) v[t] = hn::Load(df, tail + t * kLanes);
      }
      // |x| as bits orders as |x| does, NaN above inf: an integer max, and the block's NaNs
      // (rare) dropped only when the max says there are some.
      VI32 vmax = hn::Zero(di);
#pragma GCC unroll 8
      for (size_t t = 0; t < kVecs; ++t)
        vmax = hn::Max(vmax, hn::And(hn::BitCast(di, v[t]), abs_mask));
      int32_t amax_bits = max_lanes(di, vmax);
      if (amax_bits > kInfBits) {
        vmax = hn::Zero(di);
#pragma GCC unroll 8
        for (size_t t = 0; t < kVecs; ++t) {
          const VI32 a = hn::And(hn::BitCast(di, v[t]), abs_mask);
          vmax = hn::Max(vmax, hn::IfThenZeroElse(hn::Gt(a, hn::Set(di, kInfBits)), a));
        }
        amax_bits = max_lanes(di, vmax);
      }
      float amax;
      std::memcpy(&amax, &amax_bits, sizeof(amax));
      const VF id = hn::Set(df, amax > 0.0f ? 127.0f / amax : 0.0f);
      int8_t* qb = bufs.q + r * w.k_pad + c0;
      VI32 qbits[kVecs];
#pragma GCC unroll 8
      for (size_t t = 0; t < kVecs; ++t) {
        qbits[t] = rounded_bits(hn::Mul(v[t], id));
      }
      bufs.qsum[r * nb + b] = store_low_bytes<kVecs>(qbits, qb);
      bufs.d[r * nb + b] = amax / 127.0f;
    }
  }
  qacts_group_sums(w, bufs);
  return bufs.view;
}

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

#if HWY_TARGET == HWY_SCALAR

// One lane: per output the block dots in int32, each scaled by d * scale, as the vector
// targets sum them (the uniform zero folded into the dot, zero terms added at the end).
void scalar_rows(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  const QMatrixView& w = *args.w;
  const QActsView& a = *args.a;
  const int64_t nb = w.blocks(), bpg = w.group_size / kQBlock;
  const size_t col_bytes = w.code_bytes_per_column();
  const auto zero = w.zero_terms != nullptr ? 0 : static_cast<int32_t>(w.uniform_zero);
  for (int64_t i = 0; i < a.m; ++i) {
    for (int64_t j = n_begin; j < n_end; ++j) {
      const uint8_t* col = w.codes + static_cast<size_t>(j) * col_bytes;
      float y = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* q = a.q + i * a.k_pad + b * kQBlock;
        int32_t dot = -zero * a.qsum[i * nb + b];
        for (int64_t t = 0; t < kQBlock; ++t) {
          const int u = w.bits == 8 ? col[b * kQBlock + t]
                                    : (col[b * 16 + t % 16] >> (t < 16 ? 0 : 4)) & 0x0F;
          dot += u * q[t];
        }
        y += static_cast<float>(dot) * (a.d[i * nb + b] * w.scales[j * w.n_groups + b / bpg]);
      }
      if (w.zero_terms != nullptr) {
        const float* zt = w.zero_terms + j * w.n_groups;
        for (int64_t g = 0; g < w.n_groups; ++g) y += zt[g] * a.gsum[i * w.n_groups + g];
      }
      if (args.bias != nullptr) y += args.bias[j];
      args.y[i * w.n + j] = y;
    }
  }
}

void QLinearGemv(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  QS_CHECK(args.w->bits == 4 || args.w->bits == 8);
  scalar_rows(args, n_begin, n_end);
}

void QLinearGemm(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  QS_CHECK(args.w->bits == 4 || args.w->bits == 8);
  scalar_rows(args, n_begin, n_end);
}

#else  // vector targets: at least one 128-bit block per vector

using DU8 = hn::ScalableTag<uint8_t>;
using DI8 = hn::ScalableTag<int8_t>;
using DU16 = hn::ScalableTag<uint16_t>;
using DI16 = hn::ScalableTag<int16_t>;
using DU64 = hn::ScalableTag<uint64_t>;
using VU8 = hn::Vec<DU8>;
using VI8 = hn::Vec<DI8>;
using VI16 = hn::Vec<DI16>;
using MI32 = hn::Mask<DI32>;
using IndicesF = decltype(hn::SetTableIndices(DF(), static_cast<const int32_t*>(nullptr)));

constexpr int64_t kVecBytes = static_cast<int64_t>(hn::MaxLanes(DU8()));
static_assert(kVecBytes % 16 == 0, "whole 128-bit blocks");
// A step of the GEMV is one 128-bit block of the vector per quantization block: 4-bit codes
// are 16 bytes a block, so one code vector, and the lane's int32 sums land in that block;
// 8-bit codes take two vectors. AVX-512: 4 blocks (128 inputs), AVX2: 2, 128-bit: 1.
constexpr int64_t kStepBlocks = kVecBytes / 16;
constexpr size_t kF32Lanes = static_cast<size_t>(kVecBytes) / 4;
constexpr bool kVnni = HWY_TARGET == HWY_AVX3_DL;

// ---- the per-target dot products ------------------------------------------------------
// Per int32 lane i: acc[i] + sum_{t<4} u[4i + t] * q[4i + t]. Every target keeps the four
// products of a lane in that lane, so each 128-bit block's lanes hold its own block's dot.

// Portable: both operands widened to i16 (codes zero-, activations sign-extended, the even
// and odd bytes of each 16-bit lane apart) and multiplied pairwise into i32, exact. `qe`,
// `qo`: the activations' even and odd bytes, widened once per step for every column.
// `ue`, `uo`: the codes' even and odd bytes, widened.
// ReorderWidenMulAccumulate may keep its sums in any lane order until RearrangeToOddPlusEven
// (NEON does: low and high halves apart), so `acc`, which is in column order, is added after.
HWY_INLINE VI32 dot_widened_split(VI16 ue, VI16 uo, VI16 qe, VI16 qo, VI32 acc) {
  const DI32 di;
  VI32 sum1 = hn::Zero(di);
  VI32 sum0 = hn::ReorderWidenMulAccumulate(di, ue, qe, hn::Zero(di), sum1);
  sum0 = hn::ReorderWidenMulAccumulate(di, uo, qo, sum0, sum1);
  return hn::Add(acc, hn::RearrangeToOddPlusEven(sum0, sum1));
}

HWY_INLINE VI32 dot_widened(VU8 u, VI16 qe, VI16 qo, VI32 acc) {
  const DU16 du16;
  const DI16 di16;
  const VI16 ue = hn::BitCast(di16, hn::And(hn::BitCast(du16, u), hn::Set(du16, 0x00FF)));
  const VI16 uo = hn::BitCast(di16, hn::ShiftRight<8>(hn::BitCast(du16, u)));
  return dot_widened_split(ue, uo, qe, qo, acc);
}

// Activations as dot_widened and vpdpbusd take them.
struct Acts {
  VI8 q;
  VI16 even, odd;
};

HWY_INLINE Acts prepare(VI8 q) {
  const DI16 di16;
  const VI16 q16 = hn::BitCast(di16, q);
  return {q, hn::ShiftRight<8>(hn::ShiftLeft<8>(q16)), hn::ShiftRight<8>(q16)};
}

// Two pairs of 4-bit codes (< 16) and activations. maddubs (u8 x s8 pairs summed into i16)
// cannot saturate on them: 2 * 15 * 127 = 3810, and both pairs added still fit (7620).
HWY_INLINE VI32 dot_nibbles(VU8 u0, const Acts& q0, VU8 u1, const Acts& q1, VI32 acc) {
#if HWY_TARGET == HWY_AVX3_DL
  return VI32{
      _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc.raw, u0.raw, q0.q.raw), u1.raw, q1.q.raw)};
#elif HWY_TARGET == HWY_AVX3
  const __m512i s16 = _mm512_add_epi16(_mm512_maddubs_epi16(u0.raw, q0.q.raw),
                                       _mm512_maddubs_epi16(u1.raw, q1.q.raw));
  return hn::Add(acc, VI32{_mm512_madd_epi16(s16, _mm512_set1_epi16(1))});
#elif HWY_TARGET == HWY_AVX2
  const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0.raw, q0.q.raw),
                                       _mm256_maddubs_epi16(u1.raw, q1.q.raw));
  return hn::Add(acc, VI32{_mm256_madd_epi16(s16, _mm256_set1_epi16(1))});
#else
  return dot_widened(u1, q1.even, q1.odd, dot_widened(u0, q0.even, q0.odd, acc));
#endif
}

// 8-bit codes (to 255): exact with VNNI's int32 sums, widened elsewhere (maddubs would
// saturate at 2 * 255 * 127).
HWY_INLINE VI32 dot_bytes(VU8 u, const Acts& q, VI32 acc) {
#if HWY_TARGET == HWY_AVX3_DL
  return VI32{_mm512_dpbusd_epi32(acc.raw, u.raw, q.q.raw)};
#else
  return dot_widened(u, q.even, q.odd, acc);
#endif
}

// ---- GEMV -------------------------------------------------------------------------------
// Per row and step: the activations of the step's blocks arranged to meet the codes (4-bit:
// `lo` holds inputs 0..15 of block i in 128-bit block i and `hi` inputs 16..31, the nibble
// order of the codes; 8-bit: `lo` the first half of the step's bytes, `hi` the second), the
// block scales spread over the int32 lanes each block's dot lands in. Zero points are added
// per output at the end, sum_g zero_term[g] gsum[g] (a uniform zero: -zero sum_g scale[g]
// gsum[g]), as the hand-written AVX2 kernel did: folding a uniform zero into the int32 dots
// instead (-zero * qsum per block, as the AVX-512 one did) cost a multiply, a lane permute
// and a mask per row and step, which the AVX2 target's 32-byte steps felt.

// 8-bit codes without VNNI: the two dots of a step are added pairwise by 64-bit lanes (each
// 128-bit block then holds two lanes of a lo block and two of a hi block, whose sums are what
// counts), so that one conversion, multiply and FMA serve the step, as the hand-written AVX2
// kernel paired its blocks; widened dots cost enough that the saved float work shows.
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

template <int kBits>
HWY_INLINE StepActs load_step(const Spread& sp, const QActsView& a, int64_t r, int64_t nb,
                              int64_t b) {
  const DF df;
  const DI8 di8;
  const int64_t left = std::min(kStepBlocks, nb - b);
  const int8_t* q = a.q + r * a.k_pad + b * kQBlock;
  // A partial step reads past the row's blocks, still inside the activation buffer (the d,
  // gsum and qsum buffers follow q); those bytes are zeroed, and so are their blocks' d.
  VI8 x0 = hn::LoadU(di8, q);
  VI8 x1 = hn::LoadU(di8, q + kVecBytes);
  VF dv;
  if (left == kStepBlocks) {
    dv = step_values(df, a.d + r * nb + b);
  } else {
    const int64_t valid = left * kQBlock;
    x0 = hn::IfThenElseZero(hn::FirstN(di8, static_cast<size_t>(valid)), x0);
    x1 = hn::IfThenElseZero(
        hn::FirstN(di8, static_cast<size_t>(std::max<int64_t>(0, valid - kVecBytes))), x1);
    dv = step_values_partial(df, a.d + r * nb + b, left);
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

// Group scales of the step's blocks for column j, spread like StepActs::d_lo / d_hi.
template <int kBits>
HWY_INLINE void step_scales(const Spread& sp, const QMatrixView& w, int64_t j, int64_t nb,
                            int64_t b, VF& s_lo, VF& s_hi) {
  const DF df;
  const int64_t bpg = w.group_size / kQBlock;
  const float* sc = w.scales + j * w.n_groups;
  VF s;
  if (bpg == 1 && b + kStepBlocks <= nb) {
    // One group per block (g32): a whole step's scales are contiguous, one load; gathering
    // them one by one made Qwen2.5-0.5B W4G32 decode 1.2x slower (qlinear_avx512.cc's note).
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

HWY_INLINE void prefetch_l2(const uint8_t* p) {
  __builtin_prefetch(p, 0, 2);
}

// y[i0 .. i0+MR, j0 .. j0+NC): NC columns stream their codes together and each step's codes
// are unpacked once for the MR rows; each step's activations are arranged once for the NC
// columns. `kWhole`: every group is a whole number of steps (or there is one group), so one
// broadcast scale serves a step; otherwise the step's block scales are spread per lane.
template <int kBits, bool kWhole, int MR, int NC>
void tile(const Spread& sp, const QLinearArgs& args, int64_t i0, int64_t j0) {
  const DF df;
  const DI32 di;
  const DU8 du8;
  const DU16 du16;
  const QMatrixView& w = *args.w;
  const QActsView& a = *args.a;
  const int64_t nb = w.blocks(), G = w.n_groups;
  const int64_t bpg = w.group_size / kQBlock;
  const size_t col_bytes = w.code_bytes_per_column();
  const VU8 nib = hn::Set(du8, 0x0F);
  // The scales (and zero terms) of the column whose codes are prefetched, as far ahead, one
  // line (16 groups) at a time: at g32 they are a fifth of the bytes streamed.
  const int64_t table_ahead =
      (kPrefetchBytes + static_cast<int64_t>(col_bytes) - 1) / static_cast<int64_t>(col_bytes) * G;
  const int64_t table_line_blocks = 16 * bpg;
  int64_t next_table_b = 0;
  // Group of block b, kept up to date without a division per step.
  int64_t g = 0, next_group_b = bpg;
  VF acc[MR][NC];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[r][c] = hn::Zero(df);

  for (int64_t b = 0; b < nb; b += kStepBlocks) {
    while (b >= next_group_b) {
      ++g;
      next_group_b += bpg;
    }
    if (G > 1 && b >= next_table_b) {
      next_table_b += table_line_blocks;
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const int64_t at = (j0 + c) * G + g + table_ahead;
        prefetch_l2(reinterpret_cast<const uint8_t*>(w.scales + at));
        if (w.zero_terms != nullptr) {
          prefetch_l2(reinterpret_cast<const uint8_t*>(w.zero_terms + at));
        }
      }
    }
    StepActs s[MR]{};
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) s[r] = load_step<kBits>(sp, a, i0 + r, nb, b);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const uint8_t* p =
          w.codes + static_cast<size_t>(j0 + c) * col_bytes + b * kQBlock * kBits / 8;
      VF s_lo, s_hi;
      if constexpr (kWhole) {
        s_lo = s_hi = hn::Set(df, w.scales[(j0 + c) * G + g]);
      } else {
        step_scales<kBits>(sp, w, j0 + c, nb, b, s_lo, s_hi);
      }
      // A partial last step reads codes past the column: the next column's, or the scales
      // that follow the codes in the resident buffer; their activations are zero.
      if constexpr (kBits == 4) {
        for (int64_t off = 0; off < kVecBytes; off += 64) prefetch_l2(p + kPrefetchBytes + off);
        const VU8 v = hn::LoadU(du8, p);
        const VU8 lo = hn::And(v, nib);
        const VU8 hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, v))), nib);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const VI32 dot = dot_nibbles(lo, s[r].lo, hi, s[r].hi, hn::Zero(di));
          acc[r][c] = hn::MulAdd(hn::ConvertTo(df, dot), hn::Mul(s[r].d_lo, s_lo), acc[r][c]);
        }
      } else {
        for (int64_t off = 0; off < 2 * kVecBytes; off += 64) {
          prefetch_l2(p + kPrefetchBytes + off);
        }
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
            acc[r][c] = hn::MulAdd(hn::ConvertTo(df, dot), hn::Mul(s[r].d_lo, s_lo), acc[r][c]);
          } else {
            acc[r][c] = hn::MulAdd(hn::ConvertTo(df, dot0), hn::Mul(s[r].d_lo, s_lo), acc[r][c]);
            acc[r][c] = hn::MulAdd(hn::ConvertTo(df, dot1), hn::Mul(s[r].d_hi, s_hi), acc[r][c]);
          }
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const float* gsum = a.gsum + (i0 + r) * G;
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const int64_t j = j0 + c;
      VF sum = acc[r][c];
      if (w.zero_terms != nullptr) {
        sum = add_group_terms(sum, w.zero_terms + j * G, gsum, G, 1.0f);
      } else if (w.uniform_zero != 0.0f) {
        sum = add_group_terms(sum, w.scales + j * G, gsum, G, -w.uniform_zero);
      }
      float y = hn::GetLane(hn::SumOfLanes(df, sum));
      if (args.bias != nullptr) y += args.bias[j];
      args.y[(i0 + r) * w.n + j] = y;
    }
  }
}

// Columns the kernels compute together: they share each step's activation arrangement.
constexpr int kTileCols = 4;
// Rows of a GEMV tile: two share each step's unpacked codes (more would spill the
// accumulators on AVX-512), a last odd row alone; the codes of the column tile (a few KiB)
// come from L1 after the first row tile.
constexpr int kGemvRows = 2;

// Rows [0, m) of columns [j0, j0 + NC) in MR-row tiles, the last rows one by one.
template <int kBits, bool kWhole, int MR, int NC>
void column_tile(const Spread& sp, const QLinearArgs& args, int64_t j0) {
  const int64_t m = args.a->m;
  int64_t i = 0;
  for (; i + MR <= m; i += MR) tile<kBits, kWhole, MR, NC>(sp, args, i, j0);
  for (; i < m; ++i) tile<kBits, kWhole, 1, NC>(sp, args, i, j0);
}

template <int kBits, bool kWhole, int MR>
void run_tiles(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  const Spread sp = make_spread<kBits>();
  int64_t j = n_begin;
  for (; j + kTileCols <= n_end; j += kTileCols) {
    column_tile<kBits, kWhole, MR, kTileCols>(sp, args, j);
  }
  for (; j < n_end; ++j) column_tile<kBits, kWhole, MR, 1>(sp, args, j);
}

template <int MR>
void dispatch(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  const QMatrixView& w = *args.w;
  const bool whole = w.n_groups == 1 || w.group_size % (kStepBlocks * kQBlock) == 0;
  if (w.bits == 4) {
    whole ? run_tiles<4, true, MR>(args, n_begin, n_end)
          : run_tiles<4, false, MR>(args, n_begin, n_end);
  } else {
    QS_CHECK(w.bits == 8);
    whole ? run_tiles<8, true, MR>(args, n_begin, n_end)
          : run_tiles<8, false, MR>(args, n_begin, n_end);
  }
}

void QLinearGemv(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  dispatch<kGemvRows>(args, n_begin, n_end);
}

// ---- GEMM -------------------------------------------------------------------------------
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
// the hand-written kernel; 16-register targets take 3, or 2 with two nibble panels.
template <int kBits>
constexpr int kGemmRows = HWY_ARCH_X86&& HWY_TARGET <= HWY_AVX3 ? 6
                          : kSplits<kBits> == 2 ? 3
                                                : 4;

// [[maybe_unused]] on the panel helpers: the one-lane target runs plain loops instead, and
// clang flags a file-local function no target of the file calls.
// Per int32 lane: acc + the four products of u's bytes with q's (vpdpbusd).
[[maybe_unused]] HWY_INLINE VI32 dot_quad(VI32 acc, VI32 u, VI32 q) {
#if HWY_TARGET == HWY_AVX3_DL
  return VI32{_mm512_dpbusd_epi32(acc.raw, u.raw, q.raw)};
#else
  (void)u;
  (void)q;
  HWY_ASSERT(false);  // panel_dot() picks this only on AVX3_DL
  return acc;
#endif
}

// Per i16 lane: acc + the two products of u's bytes with q's (maddubs, saturating).
[[maybe_unused]] HWY_INLINE VI16 dot_pairs(VI16 acc, VI32 u, VI32 q) {
#if HWY_TARGET == HWY_AVX3
  return hn::Add(acc, VI16{_mm512_maddubs_epi16(u.raw, q.raw)});
#elif HWY_TARGET == HWY_AVX2
  return hn::Add(acc, VI16{_mm256_maddubs_epi16(u.raw, q.raw)});
#else
  (void)u;
  (void)q;
  HWY_ASSERT(false);  // panel_dot() picks this only on AVX3 and AVX2
  return acc;
#endif
}

// Per int32 lane: the sum of its two i16 lanes, times f.
[[maybe_unused]] HWY_INLINE VI32 widen_pairs(VI16 s, int16_t f) {
#if HWY_TARGET == HWY_AVX3
  return VI32{_mm512_madd_epi16(s.raw, _mm512_set1_epi16(f))};
#elif HWY_TARGET == HWY_AVX2
  return VI32{_mm256_madd_epi16(s.raw, _mm256_set1_epi16(f))};
#else
  (void)s;
  (void)f;
  HWY_ASSERT(false);
  return hn::Zero(DI32());
#endif
}

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
        gemm_rows<kBits, kGemmRows<kBits>>(args, panel, tables, g_first, j0, nc, b0, nbk, r0,
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

HWY_EXPORT(QLinearGemv);
HWY_EXPORT(QLinearGemm);
HWY_EXPORT(QLinearQuantizeActs);

const QLinearKernels& qlinear_hwy(int64_t target) {
  static const std::vector<std::pair<int64_t, QLinearKernels>> tables = [] {
    std::vector<std::pair<int64_t, QLinearKernels>> all;
    for (int64_t t : elementwise_hwy_targets()) {
      // The index HWY_DYNAMIC_DISPATCH reads from hwy::GetChosenTarget(), for one target, as
      // elementwise_hwy.cc takes it.
      const int64_t shifted = HWY_CHOSEN_TARGET_SHIFT(t);
      const int64_t mask = shifted != 0 ? shifted : HWY_CHOSEN_TARGET_MASK_SCALAR;
      const size_t i = hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<uint64_t>(mask));
      const QLinearKernels k = {HWY_DISPATCH_TABLE(QLinearGemv)[i],
                                HWY_DISPATCH_TABLE(QLinearGemm)[i],
                                HWY_DISPATCH_TABLE(QLinearQuantizeActs)[i]};
      QS_CHECK(k.gemv && k.gemm && k.quantize_acts);
      all.emplace_back(t, k);
    }
    return all;
  }();
  for (const auto& [t, k] : tables) {
    if (t == target) return k;
  }
  QS_CHECK_MSG(false, "not a target qlinear_hwy.cc is compiled for");
  return tables.front().second;
}

}  // namespace qs::kernels::cpu
#endif  // HWY_ONCE
