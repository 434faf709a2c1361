// kernels/cpu: the AVX-512 exp of the *_avx512.cc kernels (the fused attention). The per-token
// ops' exp_sub, which the AutoRound backward recomputes the attention probabilities with, is
// Highway's now (elementwise_hwy.cc) and gives the same bits on its AVX-512 targets, so the two
// still agree (elementwise_kernels_test checks it). Cephes' expf polynomial
// (rel. error ~2 ulp on [-87, 88]) scaled by vscalefps, which also gives exact 0 / inf at the
// extremes. Only files compiled with the AVX-512 flags may include it.
#pragma once

#include <immintrin.h>

namespace qs::kernels::cpu {

// e^x = 2^n * e^r with n = round(x / ln 2), |r| <= ln 2 / 2, ln 2 split in two parts so that
// r is exact (Cody-Waite). Inputs are clamped to [-104, 89], beyond which the f32 result is
// 0 or inf anyway; max/min take x as the second operand so that a NaN passes through.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

}  // namespace qs::kernels::cpu
