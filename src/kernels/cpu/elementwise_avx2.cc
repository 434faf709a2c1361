// kernels/cpu: AVX2+FMA per-token ops, 8 lanes, scalar tails (AVX2 has no cheap masked
// 16-bit ops, and a tail is at most 7 elements). exp() is the Cephes expf polynomial with
// 2^n built in the exponent field, so inputs are clamped to [-87, 88]: below that the
// result is < 1.7e-38 instead of 0 (an absolute error no caller can see), above it only
// silu's exp(-g) for g < -88 is affected, where g / (1 + e) is ~0 either way.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/reduce_avx2.h"

namespace qs::kernels::cpu {
namespace {

// See exp_ps in exp_avx512.h; max/min keep x second so that NaN propagates.
__m256 exp_ps(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // n is in [-126, 127] after the clamp, so (n + 127) << 23 is a normal power of two.
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// See erf_ps in elementwise_avx512.cc.
__m256 erf_ps(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-4.0f), _mm256_min_ps(_mm256_set1_ps(4.0f), x));
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
  __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
  return _mm256_div_ps(_mm256_mul_ps(x, p), q);
}

__m256 gelu_erf_ps(__m256 v) {
  const __m256 e = erf_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678f)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v),
                       _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace

// The tail goes through the same vector path from a padded copy, so that every element gets
// the same approximation.
void gelu_erf_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu_erf_ps(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float tail[8] = {};
    std::copy(x + i, x + n, tail);
    _mm256_storeu_ps(tail, gelu_erf_ps(_mm256_loadu_ps(tail)));
    std::copy(tail, tail + (n - i), x + i);
  }
}

void rms_norm_avx2(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * d;
    float* yi = y + i * d;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= d; j += 16) {
      const __m256 a = _mm256_loadu_ps(xi + j), b = _mm256_loadu_ps(xi + j + 8);
      acc0 = _mm256_fmadd_ps(a, a, acc0);
      acc1 = _mm256_fmadd_ps(b, b, acc1);
    }
    double ss = reduce_add(_mm256_add_ps(acc0, acc1));
    for (; j < d; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float inv_s = 1.0f / std::sqrt(static_cast<float>(ss / d) + eps);
    const __m256 inv = _mm256_set1_ps(inv_s);
    for (j = 0; j + 8 <= d; j += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xi + j), inv);
      _mm256_storeu_ps(yi + j, _mm256_mul_ps(_mm256_loadu_ps(weight + j), v));
    }
    for (; j < d; ++j) yi[j] = weight[j] * (xi[j] * inv_s);
  }
}

void silu_mul_avx2(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void rope_rotate_half_avx2(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                           const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      int64_t j = 0;
      for (; j + 8 <= half; j += 8) {
        const __m256 x1 = _mm256_loadu_ps(v + j), x2 = _mm256_loadu_ps(v + half + j);
        const __m256 cj = _mm256_loadu_ps(c + j), sj = _mm256_loadu_ps(s + j);
        // GCC may fuse one of the products into an FMA: within one rounding of the oracle.
        _mm256_storeu_ps(v + j, _mm256_sub_ps(_mm256_mul_ps(x1, cj), _mm256_mul_ps(x2, sj)));
        _mm256_storeu_ps(v + half + j, _mm256_add_ps(_mm256_mul_ps(x2, cj), _mm256_mul_ps(x1, sj)));
      }
      for (; j < half; ++j) {
        const float x1 = v[j], x2 = v[j + half];
        v[j] = x1 * c[j] - x2 * s[j];
        v[j + half] = x2 * c[j] + x1 * s[j];
      }
    }
  }
}

float exp_sub_avx2(const float* x, int64_t n, float shift, float* out) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    if (out != nullptr) _mm256_storeu_ps(out + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float sum_s = reduce_add(sum);
  for (; i < n; ++i) {
    const float e = std::exp(x[i] - shift);
    if (out != nullptr) out[i] = e;
    sum_s += e;
  }
  return sum_s;
}

void softmax_avx2(float* x, int64_t n) {
  if (n <= 0) return;
  __m256 mx = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  float max_s = reduce_max(mx);
  for (; i < n; ++i) max_s = std::max(max_s, x[i]);
  const __m256 max_v = _mm256_set1_ps(max_s);
  __m256 sum = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), max_v));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float sum_s = reduce_add(sum);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max_s);
    sum_s += x[i];
  }
  const float inv_s = 1.0f / sum_s;
  const __m256 inv = _mm256_set1_ps(inv_s);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (; i < n; ++i) x[i] *= inv_s;
}

void add_inplace_avx2(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

}  // namespace qs::kernels::cpu
