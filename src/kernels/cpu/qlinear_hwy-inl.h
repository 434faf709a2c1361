// kernels/cpu: what the int8-activation GEMV (qlinear_gemv_hwy.cc) and GEMM
// (qlinear_gemm_hwy.cc) share, per Highway target: the u8 x s8 dot products, the only code
// written per target (Highway 1.0.3 has no such ops): vpdpbusd on AVX3_DL, maddubs + madd on
// AVX3/AVX2 (for 8-bit codes, the GEMM's nibble panels; the GEMV widens them), and elsewhere
// both operands widened to i16 for ReorderWidenMulAccumulate; the vector geometry both step
// by; and the one-lane SCALAR target's plain loops, its GEMV and GEMM alike. Each source
// includes this once per target (foreach_target.h), after <hwy/highway.h> and before its own
// HWY_BEFORE_NAMESPACE, which then takes the AVX3_DL target string set here.

// Highway's guard for per-target headers: foreach_target.h flips HWY_TARGET_TOGGLE before each
// target's pass, and this flips with it, so that every pass sees the header once.
#if defined(QS_KERNELS_CPU_QLINEAR_HWY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QS_KERNELS_CPU_QLINEAR_HWY_INL_H_
#undef QS_KERNELS_CPU_QLINEAR_HWY_INL_H_
#else
#define QS_KERNELS_CPU_QLINEAR_HWY_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/qmatrix.h"

// Highway 1.0.3's AVX3_DL attributes name AVX-VNNI but not AVX512-VNNI, which vpdpbusd on
// zmm needs; every CPU Highway runs AVX3_DL on has it (its CPUID check requires VNNI). So the
// AVX3_DL code of the sources including this gets Highway's list (set_macros-inl.h) plus
// avx512vnni: redefined before HWY_BEFORE_NAMESPACE, which pushes it as GCC's target pragma or
// clang's attribute (a `#pragma GCC target` alone is ignored by clang). set_macros-inl.h
// defines it afresh for each target.
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
// File-local, as each source's own kernels are: each source compiles its own copy, and no
// name defined here (scalar_rows is not inline) meets another source's at link time.
namespace {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI32 = hn::ScalableTag<int32_t>;
using VF = hn::Vec<DF>;
using VI32 = hn::Vec<DI32>;

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

#else  // vector targets: at least one 128-bit block per vector

using DU8 = hn::ScalableTag<uint8_t>;
using DI8 = hn::ScalableTag<int8_t>;
using DU16 = hn::ScalableTag<uint16_t>;
using DI16 = hn::ScalableTag<int16_t>;
using DU64 = hn::ScalableTag<uint64_t>;
using VU8 = hn::Vec<DU8>;
using VI8 = hn::Vec<DI8>;
using VI16 = hn::Vec<DI16>;

constexpr int64_t kVecBytes = static_cast<int64_t>(hn::MaxLanes(DU8()));
static_assert(kVecBytes % 16 == 0, "whole 128-bit blocks");
// A step of the GEMV is one 128-bit block of the vector per quantization block: 4-bit codes
// are 16 bytes a block, so one code vector, and the lane's int32 sums land in that block;
// 8-bit codes take two vectors. AVX-512: 4 blocks (128 inputs), AVX2: 2, 128-bit: 1.
constexpr int64_t kStepBlocks = kVecBytes / 16;
constexpr size_t kF32Lanes = static_cast<size_t>(kVecBytes) / 4;
constexpr bool kVnni = HWY_TARGET == HWY_AVX3_DL;

// Streams of codes are prefetched into L2 ahead of use: a column's codes (GEMV) or the next
// panel's (GEMM) are too short a stream for the hardware prefetcher to reach full speed.
HWY_INLINE void prefetch_l2(const uint8_t* p) {
  __builtin_prefetch(p, 0, 2);
}

// ---- the per-target dot products ------------------------------------------------------
// The GEMV's, per int32 lane i: acc[i] + sum_{t<4} u[4i + t] * q[4i + t]. Every target keeps
// the four products of a lane in that lane, so each 128-bit block's lanes hold its own block's
// dot.

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

// GEMM: a panel word (4 codes of one column) against an activation quad broadcast to every
// lane, as qlinear_gemm_hwy.cc's kPanelDot picks per target.

// Per int32 lane: acc + the four products of u's bytes with q's (vpdpbusd).
HWY_INLINE VI32 dot_quad(VI32 acc, VI32 u, VI32 q) {
#if HWY_TARGET == HWY_AVX3_DL
  return VI32{_mm512_dpbusd_epi32(acc.raw, u.raw, q.raw)};
#else
  (void)u;
  (void)q;
  HWY_ASSERT(false);  // kPanelDot picks this only on AVX3_DL
  return acc;
#endif
}

// Per i16 lane: acc + the two products of u's bytes with q's (maddubs, saturating).
HWY_INLINE VI16 dot_pairs(VI16 acc, VI32 u, VI32 q) {
#if HWY_TARGET == HWY_AVX3
  return hn::Add(acc, VI16{_mm512_maddubs_epi16(u.raw, q.raw)});
#elif HWY_TARGET == HWY_AVX2
  return hn::Add(acc, VI16{_mm256_maddubs_epi16(u.raw, q.raw)});
#else
  (void)u;
  (void)q;
  HWY_ASSERT(false);  // kPanelDot picks this only on AVX3 and AVX2
  return acc;
#endif
}

// Per int32 lane: the sum of its two i16 lanes, times f.
HWY_INLINE VI32 widen_pairs(VI16 s, int16_t f) {
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

#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace qs::kernels::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target guard
