// kernels/cpu: AVX-512 per-token ops. Tails use masked loads and stores, so every element
// takes the same vector path. exp() is exp_avx512.h's (Cephes' expf polynomial, ~2 ulp).
// GCC 12's AVX-512 headers trip a false -Wuninitialized; see linear_avx512.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu/reduce_avx512.h"

namespace qs::kernels::cpu {
namespace {

__mmask16 first_lanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// erf(x) as XLA's f32 rational approximation x P(x^2) / Q(x^2) on [-4, 4] (outside, erf is
// +-1 in f32): within 4.2e-7 of erf, which keeps GELU within 1.4e-6 of the exact value for
// |x| <= 10 (libm's erff: 4.5e-7). Whisper's encoder runs 11M of these per 30 s window.
__m512 erf_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-4.0f), _mm512_min_ps(_mm512_set1_ps(4.0f), x));
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-2.72614225801306e-10f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.77068142495902e-08f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.10102402082508e-06f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-5.69250639462346e-05f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-7.34990630326855e-04f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.95459980854025e-03f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.60960333262415e-02f));
  __m512 q = _mm512_set1_ps(-1.45660718464996e-05f);
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-2.13374055278905e-04f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.68282697438203e-03f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-7.37332916720468e-03f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.42647390514189e-02f));
  return _mm512_div_ps(_mm512_mul_ps(x, p), q);
}

}  // namespace

void gelu_erf_avx512(float* x, int64_t n) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + i);
    const __m512 e = erf_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678f)));
    _mm512_mask_storeu_ps(x + i, mask,
                          _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e)));
  }
}

void rms_norm_avx512(const float* x, int64_t m, int64_t d, const float* weight, float eps,
                     float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * d;
    float* yi = y + i * d;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= d; j += 32) {
      const __m512 a = _mm512_loadu_ps(xi + j), b = _mm512_loadu_ps(xi + j + 16);
      acc0 = _mm512_fmadd_ps(a, a, acc0);
      acc1 = _mm512_fmadd_ps(b, b, acc1);
    }
    for (; j < d; j += 16) {
      const __m512 a = _mm512_maskz_loadu_ps(first_lanes(d - j), xi + j);
      acc0 = _mm512_fmadd_ps(a, a, acc0);
    }
    const double ss = reduce_add(_mm512_add_ps(acc0, acc1));
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(static_cast<float>(ss / d) + eps));
    for (j = 0; j < d; j += 16) {
      const __mmask16 mask = first_lanes(d - j);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, xi + j), inv);
      _mm512_mask_storeu_ps(yi + j, mask,
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, weight + j), v));
    }
  }
}

void silu_mul_avx512(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(mask, gate + i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, mask, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(mask, up + i)));
  }
}

void rope_rotate_half_avx512(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                             const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int64_t j = 0; j < half; j += 16) {
        const __mmask16 mask = first_lanes(half - j);
        const __m512 x1 = _mm512_maskz_loadu_ps(mask, v + j);
        const __m512 x2 = _mm512_maskz_loadu_ps(mask, v + half + j);
        const __m512 cj = _mm512_maskz_loadu_ps(mask, c + j);
        const __m512 sj = _mm512_maskz_loadu_ps(mask, s + j);
        // GCC may fuse one of the products into an FMA: within one rounding of the oracle.
        _mm512_mask_storeu_ps(v + j, mask,
                              _mm512_sub_ps(_mm512_mul_ps(x1, cj), _mm512_mul_ps(x2, sj)));
        _mm512_mask_storeu_ps(v + half + j, mask,
                              _mm512_add_ps(_mm512_mul_ps(x2, cj), _mm512_mul_ps(x1, sj)));
      }
    }
  }
}

void softmax_avx512(float* x, int64_t n) {
  if (n <= 0) return;
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx = neg_inf;
  for (int64_t i = 0; i < n; i += 16)
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, first_lanes(n - i), x + i));
  const __m512 max_v = _mm512_set1_ps(reduce_max(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), max_v));
    _mm512_mask_storeu_ps(x + i, mask, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(mask, e));
  }
  const __m512 inv = _mm512_set1_ps(1.0f / reduce_add(sum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
    _mm512_mask_storeu_ps(x + i, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), inv));
  }
}

float exp_sub_avx512(const float* x, int64_t n, float shift, float* out) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), s));
    if (out != nullptr) _mm512_mask_storeu_ps(out + i, mask, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(mask, e));
  }
  return reduce_add(sum);
}

void add_inplace_avx512(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
    _mm512_mask_storeu_ps(
        y + i, mask,
        _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y + i), _mm512_maskz_loadu_ps(mask, x + i)));
  }
}

}  // namespace qs::kernels::cpu
