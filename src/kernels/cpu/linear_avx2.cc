// kernels/cpu: AVX2+FMA+F16C linear kernels, the same design as linear_avx512.cc with
// 8-lane vectors and 16 registers (GEMV for decode, packed-panel GEMM for prefill).
// f32 accumulation throughout; compiled with -mavx2 -mfma -mf16c (file suffix _avx2.cc).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/check.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/reduce_avx2.h"

namespace qs::kernels::cpu {
namespace {

// Loads 8 weights as f32. AVX2 has no masked 16-bit loads, so k tails are done in scalar.
struct F32Weights {
  using T = float;
  static __m256 load(const T* p) { return _mm256_loadu_ps(p); }
  static float scalar(const T* p) { return *p; }
};

struct BF16Weights {
  using T = uint16_t;
  static __m256 load(const T* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float scalar(const T* p) { return bf16_to_f32(*p); }
};

struct F16Weights {
  using T = uint16_t;
  static __m256 load(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float scalar(const T* p) { return _cvtsh_ss(*p); }
};

// ---- GEMV: M rows of x against R rows of w, w streamed once ----------------------------
// Each cache line of the rows 16 ahead is prefetched into L2: see linear_avx512.cc.
constexpr int64_t kGemvPrefetchRows = 16;

template <class W, int M, int R>
void gemv_block(const LinearArgs& a, int64_t i0, int64_t j) {
  const auto* w = static_cast<const typename W::T*>(a.w) + j * a.k;
  const float* x = a.x + i0 * a.k;
  const int64_t k = a.k;
  __m256 acc[M][R];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    __m256 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      wv[r] = W::load(w + r * k + kk);
      if (kk * sizeof(typename W::T) % 64 == 0)
        _mm_prefetch(reinterpret_cast<const char*>(w + (kGemvPrefetchRows + r) * k + kk),
                     _MM_HINT_T1);
    }
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + kk);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float s = reduce_add(acc[i][r]);
      for (int64_t t = kk; t < k; ++t) s += x[i * k + t] * W::scalar(w + r * k + t);
      const float b = a.bias != nullptr ? a.bias[j + r] : 0.0f;
      a.y[(i0 + i) * a.n + j + r] = s + b;
    }
  }
}

// One block of R = 4 rows of w against all m rows of x, two rows of x at a time (8
// accumulators, 4 weight vectors, 1 x vector of the 16 registers); the block comes from
// DRAM for the first pair and from L1/L2 for the rest, as in linear_avx512.cc.
template <class W, int R>
void gemv_column_block(const LinearArgs& a, int64_t j) {
  int64_t i0 = 0;
  for (; i0 + 2 <= a.m; i0 += 2) gemv_block<W, 2, R>(a, i0, j);
  if (i0 < a.m) gemv_block<W, 1, R>(a, i0, j);
}

template <class W>
void gemv(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  int64_t j = n_begin;
  for (; j + 4 <= n_end; j += 4) gemv_column_block<W, 4>(a, j);
  for (; j < n_end; ++j) gemv_column_block<W, 1>(a, j);
}

// ---- GEMM: f32 panels [kc][NR] of w, MR x NR register tiles (see linear_avx512.cc) -----
constexpr int kNR = 16;    // two ymm of output columns
constexpr int kMR = 6;     // 12 accumulators + 2 panel vectors + 1 broadcast < 16 registers
constexpr int kKC = 1024;  // panel = 1024 * 16 * 4 B = 64 KiB

// In-register transpose: on return r[c] holds column c of the 8 x 8 block whose row i was r[i].
void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: rows 4g..4g+3 of column 4L + c.
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g) {
    u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// panel[kk][jj] = w[j0 + jj][kb + kk] as f32 for jj < nr, kk < kc; columns nr..NR-1 zero.
// Full 8 x 8 blocks are converted and transposed in registers; edges go element by element.
template <class W>
void pack_panel(const LinearArgs& a, int64_t j0, int64_t nr, int64_t kb, int64_t kc, float* panel) {
  const auto* w = static_cast<const typename W::T*>(a.w) + j0 * a.k + kb;
  const int64_t full_rows = nr / 8 * 8, full_k = kc / 8 * 8;
  for (int64_t jj = 0; jj < full_rows; jj += 8) {
    for (int64_t kk = 0; kk < full_k; kk += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = W::load(w + (jj + i) * a.k + kk);
      transpose8x8(r);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) _mm256_store_ps(panel + (kk + i) * kNR + jj, r[i]);
    }
  }
  for (int64_t jj = 0; jj < kNR; ++jj) {
    const int64_t k_from = jj < full_rows ? full_k : 0;
    for (int64_t kk = k_from; kk < kc; ++kk)
      panel[kk * kNR + jj] = jj < nr ? W::scalar(w + jj * a.k + kk) : 0.0f;
  }
}

// c[R, 16] (+)= x[R, kc] @ panel[kc, 16]; `first` starts from bias[16] (or zero) instead
// of c. All 16 columns of c and bias are addressable (the driver pads partial tiles).
template <int R>
void micro_kernel(const float* x, int64_t ldx, const float* panel, int64_t kc, float* c,
                  int64_t ldc, bool first, const float* bias) {
  __m256 c0[R], c1[R];
  if (first) {
    const __m256 b0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 b1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) c0[r] = b0, c1[r] = b1;
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      c0[r] = _mm256_loadu_ps(c + r * ldc);
      c1[r] = _mm256_loadu_ps(c + r * ldc + 8);
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m256 p0 = _mm256_load_ps(panel + kk * kNR);
    const __m256 p1 = _mm256_load_ps(panel + kk * kNR + 8);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + r * ldx + kk);
      c0[r] = _mm256_fmadd_ps(xv, p0, c0[r]);
      c1[r] = _mm256_fmadd_ps(xv, p1, c1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(c + r * ldc, c0[r]);
    _mm256_storeu_ps(c + r * ldc + 8, c1[r]);
  }
}

using MicroKernel = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool,
                             const float*);

template <int... Rs>
constexpr auto make_micro_table(std::integer_sequence<int, Rs...>) {
  return std::array<MicroKernel, sizeof...(Rs)>{&micro_kernel<Rs + 1>...};
}
constexpr auto kMicroKernels = make_micro_table(std::make_integer_sequence<int, kMR>{});

template <class W>
void gemm(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  alignas(32) float panel[kKC * kNR];
  for (int64_t kb = 0; kb < a.k; kb += kKC) {
    const int64_t kc = std::min<int64_t>(kKC, a.k - kb);
    for (int64_t j0 = n_begin; j0 < n_end; j0 += kNR) {
      const int64_t nr = std::min<int64_t>(kNR, n_end - j0);
      pack_panel<W>(a, j0, nr, kb, kc, panel);
      const float* bias = a.bias != nullptr ? a.bias + j0 : nullptr;
      // A partial tile (the last nr < 16 columns) goes through a padded copy so that the
      // micro-kernel never reads or writes past column n_end.
      alignas(32) float bias_pad[kNR] = {};
      if (bias != nullptr && nr < kNR) {
        std::memcpy(bias_pad, bias, sizeof(float) * nr);
        bias = bias_pad;
      }
      for (int64_t i0 = 0; i0 < a.m; i0 += kMR) {
        const int64_t mr = std::min<int64_t>(kMR, a.m - i0);
        const float* x = a.x + i0 * a.k + kb;
        float* y = a.y + i0 * a.n + j0;
        if (nr == kNR) {
          kMicroKernels[mr - 1](x, a.k, panel, kc, y, a.n, kb == 0, bias);
          continue;
        }
        alignas(32) float tile[kMR * kNR];
        if (kb != 0) {
          for (int64_t r = 0; r < mr; ++r)
            std::memcpy(tile + r * kNR, y + r * a.n, sizeof(float) * nr);
        }
        kMicroKernels[mr - 1](x, a.k, panel, kc, tile, kNR, kb == 0, bias);
        for (int64_t r = 0; r < mr; ++r)
          std::memcpy(y + r * a.n, tile + r * kNR, sizeof(float) * nr);
      }
    }
  }
}

}  // namespace

void linear_gemv_avx2(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case DType::kF32:
      return gemv<F32Weights>(a, n_begin, n_end);
    case DType::kBF16:
      return gemv<BF16Weights>(a, n_begin, n_end);
    case DType::kF16:
      return gemv<F16Weights>(a, n_begin, n_end);
    default:
      QS_CHECK_MSG(false, "linear_gemv_avx2: weight dtype not F32/F16/BF16");
  }
}

void linear_gemm_avx2(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case DType::kF32:
      return gemm<F32Weights>(a, n_begin, n_end);
    case DType::kBF16:
      return gemm<BF16Weights>(a, n_begin, n_end);
    case DType::kF16:
      return gemm<F16Weights>(a, n_begin, n_end);
    default:
      QS_CHECK_MSG(false, "linear_gemm_avx2: weight dtype not F32/F16/BF16");
  }
}

}  // namespace qs::kernels::cpu
