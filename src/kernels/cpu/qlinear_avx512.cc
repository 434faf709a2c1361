// kernels/cpu: the AVX-512 VNNI quantized linear GEMV over the resident layout of
// kernels/qmatrix.h: int8 activations (qlinear_quantize_hwy.cc's quantize_acts, bit-identical to
// the scalar one) times unsigned 4- or 8-bit codes with vpdpbusd, so every block dot product is
// exact in int32 and results differ from ref::qlinear_int8 only by float summation order.
// The GEMM and the quantizer are the Highway ones, qlinear_gemm_hwy.cc and qlinear_quantize_hwy.cc
// (docs/kernels.md, "Quantized linear kernels"). Compiled with the AVX-512 F/BW/VL/DQ/BF16/VNNI
// flags (file suffix _avx512.cc). GCC 12's AVX-512 headers build some intrinsics from
// _mm512_undefined_*(), which -Wuninitialized flags once inlined (a false positive of GCC 12).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cpu/qlinear_cpu.h"

namespace qs::kernels::cpu {
namespace {

// The GEMV walks the inputs in steps of four blocks (128 inputs): 64 bytes of 4-bit codes,
// one zmm, per column.
constexpr int64_t kStepBlocks = 4;
// Columns the GEMV computes together: they share each step's activation shuffles.
constexpr int kGemvCols = 4;

// The first `count` bytes / lanes (none for count <= 0).
inline __mmask64 byte_mask(int64_t count) {
  if (count <= 0) return 0;
  return count >= 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}
inline __mmask16 lane_mask(int64_t count) {
  if (count <= 0) return 0;
  return count >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << count) - 1);
}

inline float hsum(__m512 v) {
  return _mm512_reduce_add_ps(v);
}

// sum_g zero_term[j, g] * gsum[r, g]: the zero points' share of y[r, j] for a weight with a
// zero-term table.
inline float zero_share(const QMatrixView& w, const QActsView& a, int64_t r, int64_t j) {
  const int64_t G = w.n_groups;
  const float* gs = a.gsum + r * G;
  const float* zt = w.zero_terms + j * G;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; g += 16) {
    const __mmask16 mk = lane_mask(G - g);
    acc =
        _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, zt + g), _mm512_maskz_loadu_ps(mk, gs + g), acc);
  }
  return hsum(acc);
}

// ---------------------------------------------------------------------------------------
// GEMV. Per row and step: the activations of 4 blocks, arranged to meet the codes' nibble
// order, and their block scales spread over the int32 lanes of each block; per column and
// step: one or two code loads and two vpdpbusd per 64 code bytes.

// One step of activations for row r: for 4-bit, `lo` holds inputs 0..15 of blocks 0..3 in
// its four 128-bit lanes and `hi` inputs 16..31 (the nibble order of the codes); for 8-bit,
// `lo` = blocks 0,1 and `hi` = blocks 2,3 in natural order. `d` spreads the block scales to
// the int32 lanes the dot products of each block land in. `corr_lo/hi` start those dot
// products at -zero * qsum[block] (one lane per block) when the weight has one uniform zero:
// sum (u - z) q = u . q - z * sum q, exactly, in int32, which spares the zero term's float
// pass per output (|z qsum| <= 256 * 32 * 127, far inside int32).
struct StepActs {
  __m512i lo, hi;
  __m512 d_lo, d_hi;  // 8-bit uses both; 4-bit only d_lo
  __m512i corr_lo, corr_hi;
};

template <int kBits>
inline StepActs load_step(const QActsView& a, int64_t r, int64_t nb, int64_t b, int32_t zero) {
  const int64_t left = std::min<int64_t>(kStepBlocks, nb - b);
  const __m512i zq = _mm512_castsi128_si512(_mm_mullo_epi32(
      _mm_maskz_loadu_epi32(static_cast<__mmask8>(lane_mask(left)), a.qsum + r * nb + b),
      _mm_set1_epi32(-zero)));
  const int8_t* q = a.q + r * a.k_pad + b * kQBlock;
  const __m512i x0 = _mm512_maskz_loadu_epi8(byte_mask(left * kQBlock), q);
  const __m512i x1 = _mm512_maskz_loadu_epi8(byte_mask(left * kQBlock - 64), q + 64);
  const __m128 d4 = _mm_maskz_loadu_ps(static_cast<__mmask8>(lane_mask(left)), a.d + r * nb + b);
  StepActs s;
  if constexpr (kBits == 4) {
    s.lo = _mm512_permutex2var_epi64(x0, _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), x1);
    s.hi = _mm512_permutex2var_epi64(x0, _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15), x1);
    s.d_lo =
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                              _mm512_castps128_ps512(d4));
    s.d_hi = s.d_lo;
    s.corr_lo = _mm512_maskz_permutexvar_epi32(
        0x1111, _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), zq);
    s.corr_hi = s.corr_lo;
  } else {
    s.lo = x0;
    s.hi = x1;
    const __m512 d = _mm512_castps128_ps512(d4);
    s.d_lo =
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), d);
    s.d_hi =
        _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), d);
    s.corr_lo = _mm512_maskz_permutexvar_epi32(
        0x0101, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0), zq);
    s.corr_hi = _mm512_maskz_permutexvar_epi32(
        0x0101, _mm512_setr_epi32(2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0), zq);
  }
  return s;
}

// Group scales of the 4 blocks of step b for column j, spread like StepActs::d_lo/d_hi.
template <int kBits>
inline void step_scales(const QMatrixView& w, int64_t j, int64_t nb, int64_t b, __m512& s_lo,
                        __m512& s_hi) {
  const int64_t bpg = w.group_size / kQBlock;
  const float* sc = w.scales + j * w.n_groups;
  __m128 s4;
  if (bpg == 1 && b + kStepBlocks <= nb) {
    // One group per block (g32): a whole step's scales are contiguous, one load. Gathering
    // them one by one (an index division each) made Qwen2.5-0.5B W4G32 decode 1.2x slower,
    // and a masked load of them slower still on Zen 4 (30 against 44 t/s), so the gather is
    // left for the last, partial step only.
    s4 = _mm_loadu_ps(sc + b);
  } else {
    const int64_t last = std::min(nb - 1, b + kStepBlocks - 1);
    s4 = _mm_setr_ps(sc[b / bpg], sc[std::min(b + 1, last) / bpg], sc[std::min(b + 2, last) / bpg],
                     sc[last / bpg]);
  }
  const __m512 s = _mm512_castps128_ps512(s4);
  if constexpr (kBits == 4) {
    s_lo =
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), s);
    s_hi = s_lo;
  } else {
    s_lo =
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), s);
    s_hi =
        _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), s);
  }
}

// A column's codes are a few hundred bytes to a few KiB, too short a stream for the hardware
// prefetcher to reach full speed before it ends, so every step prefetches (into L2) the codes
// this far ahead; the columns are contiguous, so that is a later column tile. Measured on the
// Qwen2.5-0.5B shapes, int4 g128, m = 1, one thread (docs/kernels.md): 4 columns ahead
// (1.8 KiB at k = 896) gave 8 GB/s, 8 KiB 14-19 GB/s, 16 KiB 23-28 GB/s (the read probe:
// 22-30 GB/s on the same busy machine), 32 KiB no better. Past the last column the
// prefetches point beyond the codes, which is harmless: prefetches never fault.
constexpr int64_t kPrefetchBytes = 16 * 1024;

// y[i0 .. i0+MR, j0 .. j0+NC): NC columns stream their codes together and each step's codes
// are unpacked once for the MR rows; each step's activations are arranged once for the NC
// columns. `kWhole`: every group is a whole number of steps (or there is one group), so one
// broadcast scale serves a step; otherwise the step's four block scales are spread per lane.
template <int kBits, bool kWhole, int MR, int NC>
void gemv_tile(const QLinearArgs& args, int64_t i0, int64_t j0) {
  const QMatrixView& w = *args.w;
  const QActsView& a = *args.a;
  const int64_t nb = w.blocks();
  const int64_t bpg = w.group_size / kQBlock;
  const size_t col_bytes = w.code_bytes_per_column();
  const __m512i nib = _mm512_set1_epi8(0x0F);
  const auto zero = w.zero_terms != nullptr ? 0 : static_cast<int32_t>(w.uniform_zero);
  __m512 acc[MR][NC];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();

  for (int64_t b = 0; b < nb; b += kStepBlocks) {
    const int64_t left = std::min<int64_t>(kStepBlocks, nb - b);
    StepActs s[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) s[r] = load_step<kBits>(a, i0 + r, nb, b, zero);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const uint8_t* p =
          w.codes + static_cast<size_t>(j0 + c) * col_bytes + b * kQBlock * kBits / 8;
      __m512 s_lo, s_hi;
      if constexpr (kWhole) {
        s_lo = s_hi = _mm512_set1_ps(w.scales[(j0 + c) * w.n_groups + b / bpg]);
      } else {
        step_scales<kBits>(w, j0 + c, nb, b, s_lo, s_hi);
      }
      if constexpr (kBits == 4) {
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes), _MM_HINT_T1);
        const __m512i v = _mm512_maskz_loadu_epi8(byte_mask(left * 16), p);
        const __m512i lo = _mm512_and_si512(v, nib);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          __m512i dot = _mm512_dpbusd_epi32(s[r].corr_lo, lo, s[r].lo);
          dot = _mm512_dpbusd_epi32(dot, hi, s[r].hi);
          acc[r][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(s[r].d_lo, s_lo), acc[r][c]);
        }
      } else {
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + 64), _MM_HINT_T1);
        const __m512i v0 = _mm512_maskz_loadu_epi8(byte_mask(left * 32), p);
        const __m512i v1 = _mm512_maskz_loadu_epi8(byte_mask(left * 32 - 64), p + 64);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m512i dot0 = _mm512_dpbusd_epi32(s[r].corr_lo, v0, s[r].lo);
          const __m512i dot1 = _mm512_dpbusd_epi32(s[r].corr_hi, v1, s[r].hi);
          acc[r][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot0), _mm512_mul_ps(s[r].d_lo, s_lo), acc[r][c]);
          acc[r][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot1), _mm512_mul_ps(s[r].d_hi, s_hi), acc[r][c]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const int64_t j = j0 + c;
      float y = hsum(acc[r][c]);
      if (w.zero_terms != nullptr) y += zero_share(w, a, i0 + r, j);
      if (args.bias != nullptr) y += args.bias[j];
      args.y[(i0 + r) * w.n + j] = y;
    }
  }
}

// Rows [0, m) of columns [j0, j0 + NC): two rows at a time share each step's unpacked codes
// (more would spill the accumulators), a last odd row alone. The codes of the column tile
// (a few KiB) come from L1 after the first row tile.
template <int kBits, bool kWhole, int NC>
void gemv_cols(const QLinearArgs& args, int64_t j0) {
  const int64_t m = args.a->m;
  int64_t i = 0;
  for (; i + 2 <= m; i += 2) gemv_tile<kBits, kWhole, 2, NC>(args, i, j0);
  if (i < m) gemv_tile<kBits, kWhole, 1, NC>(args, i, j0);
}

template <int kBits, bool kWhole>
void gemv(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  int64_t j = n_begin;
  for (; j + kGemvCols <= n_end; j += kGemvCols) gemv_cols<kBits, kWhole, kGemvCols>(args, j);
  for (; j < n_end; ++j) gemv_cols<kBits, kWhole, 1>(args, j);
}

}  // namespace

// Kept beside qlinear_gemv_hwy.cc's AVX3_DL GEMV, which measured 0.63-1.63x this one (one thread,
// Qwen2.5-0.5B shapes, m = 1 and 8, W4G128/W4G32/W8, Zen 5, 2026-12-06; docs/kernels.md,
// "Quantized linear kernels"): faster on every m = 8 W4 row, level on m = 8 W8, slower at
// m = 1 on every W8 row (1.35-1.63x) and on the down projection's W4G128 (1.32x). The only
// hand-written int8-activation kernel left: the AVX2 one was deleted once Highway's AVX2 GEMV
// measured 0.81-1.03x it on every row.
void qlinear_gemv_avx512(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  const QMatrixView& w = *args.w;
  const bool whole = w.n_groups == 1 || w.group_size % (kStepBlocks * kQBlock) == 0;
  if (w.bits == 4) {
    whole ? gemv<4, true>(args, n_begin, n_end) : gemv<4, false>(args, n_begin, n_end);
  } else {
    QS_CHECK(w.bits == 8);
    whole ? gemv<8, true>(args, n_begin, n_end) : gemv<8, false>(args, n_begin, n_end);
  }
}

}  // namespace qs::kernels::cpu
