// kernels/cpu: AVX-512 linear kernels (GEMV for decode, packed-panel GEMM for prefill).
// Weights are widened to f32 in registers (bf16 by a 16-bit shift, f16 by vcvtph2ps) and
// every product is accumulated in f32, so results differ from the reference only by
// summation order. Compiled with -mavx512f/bw/vl/dq (file suffix _avx512.cc).
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*(), which
// -Wuninitialized flags once inlined (a false positive of GCC 12).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "core/check.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/reduce_avx512.h"

namespace qs::kernels::cpu {
namespace {

// Loads 16 weights as f32 (`load32`: 32 of them, with one 64-byte load for 16-bit types);
// `load_tail` reads only the lanes in `mask` and zeroes the rest, so no byte past the end
// of a row is touched.
struct F32Weights {
  using T = float;
  static __m512 load(const T* p) { return _mm512_loadu_ps(p); }
  static __m512 load_tail(const T* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
  static void load32(const T* p, __m512& lo, __m512& hi) {
    lo = _mm512_loadu_ps(p);
    hi = _mm512_loadu_ps(p + 16);
  }
  static float scalar(const T* p) { return *p; }
};

struct BF16Weights {
  using T = uint16_t;
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const T* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load_tail(const T* p, __mmask16 mask) {
    return widen(_mm256_maskz_loadu_epi16(mask, p));
  }
  static void load32(const T* p, __m512& lo, __m512& hi) {
    const __m512i v = _mm512_loadu_si512(p);
    lo = widen(_mm512_castsi512_si256(v));
    hi = widen(_mm512_extracti64x4_epi64(v, 1));
  }
  static float scalar(const T* p) { return bf16_to_f32(*p); }
};

struct F16Weights {
  using T = uint16_t;
  static __m512 load(const T* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load_tail(const T* p, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
  }
  static void load32(const T* p, __m512& lo, __m512& hi) {
    const __m512i v = _mm512_loadu_si512(p);
    lo = _mm512_cvtph_ps(_mm512_castsi512_si256(v));
    hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
  }
  static float scalar(const T* p) { return _cvtsh_ss(*p); }
};

// Horizontal sum. (_mm512_reduce_add_ps trips GCC 12's -Wuninitialized inside its header.)
__mmask16 first_lanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// ---- GEMV: M rows of x against R rows of w at a time ----------------------------------
// Each weight vector is loaded once and used for all M rows of x, so w is streamed from
// memory exactly once per call; M * R independent accumulators hide the FMA latency.
// 32 weights per row per step (a whole cache line of bf16) ran ~5% faster than 16.
// R rows are R interleaved streams, each only k * 2 bytes long (1792 B for a 0.5B model),
// too short for the hardware prefetcher; so every cache line of the rows 16 ahead is
// prefetched into L2 (measured: T1 beats T0, which competes with the demand loads for L1
// miss buffers; 1-6 blocks ahead are equal; +70% on [4864 x 896], +10% on [896 x 4864]).
// Past the last row the prefetches point beyond w, which is harmless: they never fault.
constexpr int64_t kGemvPrefetchRows = 16;

template <class W, int M, int R>
void gemv_block(const LinearArgs& a, int64_t i0, int64_t j) {
  const auto* w = static_cast<const typename W::T*>(a.w) + j * a.k;
  const float* x = a.x + i0 * a.k;
  const int64_t k = a.k;
  __m512 acc[M][R];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  int64_t kk = 0;
  for (; kk + 32 <= k; kk += 32) {
    __m512 lo[R], hi[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      W::load32(w + r * k + kk, lo[r], hi[r]);
      const char* ahead = reinterpret_cast<const char*>(w + (kGemvPrefetchRows + r) * k + kk);
      for (size_t off = 0; off < 32 * sizeof(typename W::T); off += 64)
        _mm_prefetch(ahead + off, _MM_HINT_T1);
    }
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m512 x0 = _mm512_loadu_ps(x + i * k + kk);
      const __m512 x1 = _mm512_loadu_ps(x + i * k + kk + 16);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        acc[i][r] = _mm512_fmadd_ps(x0, lo[r], acc[i][r]);
        acc[i][r] = _mm512_fmadd_ps(x1, hi[r], acc[i][r]);
      }
    }
  }
  if (kk + 16 <= k) {
    __m512 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = W::load(w + r * k + kk);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + kk);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
    kk += 16;
  }
  if (kk < k) {
    const __mmask16 mask = first_lanes(k - kk);
    __m512 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = W::load_tail(w + r * k + kk, mask);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * k + kk);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float b = a.bias != nullptr ? a.bias[j + r] : 0.0f;
      a.y[(i0 + i) * a.n + j + r] = reduce_add(acc[i][r]) + b;
    }
  }
}

// One block of R rows of w against all m rows of x, in chunks of at most 4 rows of x: the
// block (R * k * 2 bytes of bf16) comes from DRAM for the first chunk and from L1/L2 for the
// others, so w is still read from memory once, while each FMA needs at most half an x load
// (8 rows of x at R = 2 needed one x load per FMA and ran at half the speed of 4 + 4).
template <class W, int R>
void gemv_column_block(const LinearArgs& a, int64_t j) {
  for (int64_t i0 = 0; i0 < a.m; i0 += 4) {
    switch (std::min<int64_t>(4, a.m - i0)) {
      case 1:
        gemv_block<W, 1, R>(a, i0, j);
        break;
      case 2:
        gemv_block<W, 2, R>(a, i0, j);
        break;
      case 3:
        gemv_block<W, 3, R>(a, i0, j);
        break;
      default:
        gemv_block<W, 4, R>(a, i0, j);
        break;
    }
  }
}

// R = 8 rows of w for one row of x, 4 for more: 4 x 4 accumulators plus 2 x 4 widened
// weight vectors and 2 x vectors stay within the 32 registers.
template <class W>
void gemv(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  int64_t j = n_begin;
  if (a.m == 1) {
    for (; j + 8 <= n_end; j += 8) gemv_block<W, 1, 8>(a, 0, j);
  } else {
    for (; j + 4 <= n_end; j += 4) gemv_column_block<W, 4>(a, j);
  }
  for (; j < n_end; ++j) gemv_column_block<W, 1>(a, j);
}

// ---- GEMM: f32 panels of w, MR x NR register tiles -------------------------------------
// Loop nest (per thread, over its own columns): k in blocks of kKC; inside, NR columns of w
// are converted to an f32 panel laid out [kc][NR] (one panel per pass, on the stack, kept in
// L2), then every MR-row strip of x is multiplied into y with MR x NR accumulators.
// Every k block sweeps all of y (m x n floats, megabytes, so from L3), and each micro-kernel
// call starts with MR x NR loads of y that miss; fewer, longer k blocks won: kKC = 1024 ran
// 10-14% faster than 256 at m = 512 (384: 4%, 512: 8%, 768: 10%).
constexpr int kNR = 32;    // two zmm of output columns
constexpr int kMR = 12;    // 24 accumulators + 2 panel vectors + broadcasts < 32 registers
constexpr int kKC = 1024;  // panel = 1024 * 32 * 4 B = 128 KiB, an eighth of L2

// In-register transpose: on return r[c] holds column c of the 16 x 16 block whose row i was
// r[i]. Three stages: 2 x 2 element interleaves, 4 x 4 within 128-bit lanes, then a 4 x 4
// transpose of the 128-bit lanes themselves.
void transpose16x16(__m512 r[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: rows 4g..4g+3 of column 4L + c.
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

// panel[kk][jj] = w[j0 + jj][kb + kk] as f32 for jj < nr, kk < kc; columns nr..NR-1 zero.
// Full 16 x 16 blocks are converted and transposed in registers; edges go element by element.
template <class W>
void pack_panel(const LinearArgs& a, int64_t j0, int64_t nr, int64_t kb, int64_t kc, float* panel) {
  const auto* w = static_cast<const typename W::T*>(a.w) + j0 * a.k + kb;
  const int64_t full_rows = nr / 16 * 16, full_k = kc / 16 * 16;
  for (int64_t jj = 0; jj < full_rows; jj += 16) {
    for (int64_t kk = 0; kk < full_k; kk += 16) {
      __m512 r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) r[i] = W::load(w + (jj + i) * a.k + kk);
      transpose16x16(r);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) _mm512_store_ps(panel + (kk + i) * kNR + jj, r[i]);
    }
  }
  for (int64_t jj = 0; jj < kNR; ++jj) {
    const int64_t k_from = jj < full_rows ? full_k : 0;
    for (int64_t kk = k_from; kk < kc; ++kk)
      panel[kk * kNR + jj] = jj < nr ? W::scalar(w + jj * a.k + kk) : 0.0f;
  }
}

// y[R, nr] (+)= x[R, kc] @ panel[kc, NR]; `first` starts from the bias (or zero) instead of y.
template <int R>
void micro_kernel(const float* x, int64_t ldx, const float* panel, int64_t kc, float* y,
                  int64_t ldy, int64_t nr, bool first, const float* bias) {
  const __mmask16 m0 = first_lanes(nr), m1 = first_lanes(nr - 16 > 0 ? nr - 16 : 0);
  __m512 c0[R], c1[R];
  if (first) {
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) c0[r] = b0, c1[r] = b1;
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      c0[r] = _mm512_maskz_loadu_ps(m0, y + r * ldy);
      c1[r] = _mm512_maskz_loadu_ps(m1, y + r * ldy + 16);
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m512 p0 = _mm512_load_ps(panel + kk * kNR);
    const __m512 p1 = _mm512_load_ps(panel + kk * kNR + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * ldx + kk]);
      c0[r] = _mm512_fmadd_ps(xv, p0, c0[r]);
      c1[r] = _mm512_fmadd_ps(xv, p1, c1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, m0, c0[r]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, m1, c1[r]);
  }
}

using MicroKernel = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                             bool, const float*);

template <int... Rs>
constexpr auto make_micro_table(std::integer_sequence<int, Rs...>) {
  return std::array<MicroKernel, sizeof...(Rs)>{&micro_kernel<Rs + 1>...};
}
// kMicroKernels[r - 1] handles a strip of r rows.
constexpr auto kMicroKernels = make_micro_table(std::make_integer_sequence<int, kMR>{});

// Pair panels (linear_cpu.h, "Pair panels") widened into the f32 panel: contiguous, a shift
// and a mask per k step where the row-major source needs a transpose. Padding columns are
// zero in the pairs already.
void pack_panel_from_pairs(const LinearArgs& a, int64_t j0, int64_t kb, int64_t kc, float* panel) {
  const auto* src = static_cast<const uint16_t*>(a.w) + j0 * a.k + kb * kPanelCols;
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m512i v = _mm512_load_si512(src + kk * kPanelCols);
    _mm512_store_ps(panel + kk * kNR, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    _mm512_store_ps(panel + kk * kNR + 16, _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask)));
  }
}

// `pack(j0, nr, kb, kc, panel)` fills one f32 panel.
template <class Pack>
void gemm_with(const LinearArgs& a, int64_t n_begin, int64_t n_end, Pack pack) {
  alignas(64) float panel[kKC * kNR];
  for (int64_t kb = 0; kb < a.k; kb += kKC) {
    const int64_t kc = std::min<int64_t>(kKC, a.k - kb);
    for (int64_t j0 = n_begin; j0 < n_end; j0 += kNR) {
      const int64_t nr = std::min<int64_t>(kNR, n_end - j0);
      pack(j0, nr, kb, kc, panel);
      const float* bias = a.bias != nullptr ? a.bias + j0 : nullptr;
      for (int64_t i0 = 0; i0 < a.m; i0 += kMR) {
        const int64_t mr = std::min<int64_t>(kMR, a.m - i0);
        kMicroKernels[mr - 1](a.x + i0 * a.k + kb, a.k, panel, kc, a.y + i0 * a.n + j0, a.n, nr,
                              kb == 0, bias);
      }
    }
  }
}

template <class W>
void gemm(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  gemm_with(a, n_begin, n_end, [&](int64_t j0, int64_t nr, int64_t kb, int64_t kc, float* panel) {
    pack_panel<W>(a, j0, nr, kb, kc, panel);
  });
}

}  // namespace

void linear_gemm_pairs_avx512(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  static_assert(kNR == kPanelCols, "one pair panel fills one f32 panel");
  gemm_with(a, n_begin, n_end, [&](int64_t j0, int64_t, int64_t kb, int64_t kc, float* panel) {
    pack_panel_from_pairs(a, j0, kb, kc, panel);
  });
}

void linear_gemv_avx512(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case DType::kF32:
      return gemv<F32Weights>(a, n_begin, n_end);
    case DType::kBF16:
      return gemv<BF16Weights>(a, n_begin, n_end);
    case DType::kF16:
      return gemv<F16Weights>(a, n_begin, n_end);
    default:
      QS_CHECK_MSG(false, "linear_gemv_avx512: weight dtype not F32/F16/BF16");
  }
}

void linear_gemm_avx512(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case DType::kF32:
      return gemm<F32Weights>(a, n_begin, n_end);
    case DType::kBF16:
      return gemm<BF16Weights>(a, n_begin, n_end);
    case DType::kF16:
      return gemm<F16Weights>(a, n_begin, n_end);
    default:
      QS_CHECK_MSG(false, "linear_gemm_avx512: weight dtype not F32/F16/BF16");
  }
}

}  // namespace qs::kernels::cpu
