// kernels/cpu: quantize_acts of qlinear_cpu.h (the int8 activations the GEMV and GEMM read)
// written once in Google Highway and compiled for each of its targets (foreach_target.h
// includes this file again per target), bit for bit the scalar quantizer; and qlinear_hwy(),
// which hands out one target's kernels from their three sources (this one,
// qlinear_gemv_hwy.cc, qlinear_gemm_hwy.cc: apart so that they compile in parallel). Per
// target are only the x86 conversion, the AVX2 byte pack and the one-lane SCALAR target's
// byte store.
#include <cstddef>
#include <cstdint>
#include <cstring>

// As in elementwise_hwy.cc: Zen 4 and Ice Lake report AVX3_DL, opt-in in Highway 1.0.3.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/qlinear_quantize_hwy.cc"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "kernels/cpu/hwy_targets.h"
#include "kernels/cpu/qlinear_cpu.h"

HWY_BEFORE_NAMESPACE();
namespace qs::kernels::cpu {
namespace HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI32 = hn::ScalableTag<int32_t>;
using VF = hn::Vec<DF>;
using VI32 = hn::Vec<DI32>;

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

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace qs::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qs::kernels::cpu {

HWY_EXPORT(QLinearQuantizeActs);

const QLinearKernels& qlinear_hwy(int64_t target) {
  static const HwyKernelTable<QLinearKernels> table = make_hwy_kernel_table([](int64_t t) {
    return QLinearKernels{qlinear_gemv_hwy(t), qlinear_gemm_hwy(t),
                          hwy_table_entry(HWY_DISPATCH_TABLE(QLinearQuantizeActs), t,
                                          "not a target qlinear_quantize_hwy.cc is compiled for")};
  });
  return hwy_kernels(table, target, "not a target the qlinear_*_hwy.cc sources are compiled for");
}

}  // namespace qs::kernels::cpu
#endif  // HWY_ONCE
