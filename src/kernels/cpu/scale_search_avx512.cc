// kernels/cpu: OPT-RTN's error sums on AVX-512 (scale_search_cpu.h). Sixteen candidates per
// pass: w[j] / s and its rounding in f32 (division is correctly rounded in every lane, so the
// quotient is the scalar one), then the error term in two halves of eight doubles. The mul and
// add must stay separate instructions (a fused multiply-add would round once where the scalar
// code rounds twice): CMakeLists.txt builds this file with -ffp-contract=off.
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*(), which
// -Wuninitialized flags once inlined (a false positive of GCC 12).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/scale_search_cpu.h"

namespace qs::kernels::cpu {

void scale_search_errors_avx512(const float* w, const float* imat, int64_t count,
                                const float* scales, int64_t n_scales, int half, double* errors) {
  const __m512 lo = _mm512_set1_ps(static_cast<float>(-half));
  const __m512 hi = _mm512_set1_ps(static_cast<float>(half - 1));
  for (int64_t c0 = 0; c0 < n_scales; c0 += 16) {
    const int64_t live = std::min<int64_t>(16, n_scales - c0);
    const __mmask16 mask = static_cast<__mmask16>((1u << live) - 1);
    // Lanes past n_scales divide by 1 and are never stored.
    const __m512 s = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), mask, scales + c0);
    const __m512d s_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(s));
    const __m512d s_hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(s, 1));
    __m512d err_lo = _mm512_setzero_pd(), err_hi = _mm512_setzero_pd();
    for (int64_t j = 0; j < count; ++j) {
      const __m512 x = _mm512_set1_ps(w[j]);
      const __m512 q = _mm512_max_ps(
          _mm512_min_ps(_mm512_roundscale_ps(_mm512_div_ps(x, s),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                        hi),
          lo);
      const __m512d xd = _mm512_set1_pd(static_cast<double>(w[j]));
      const __m512d m = _mm512_set1_pd(imat != nullptr ? static_cast<double>(imat[j]) : 1.0);
      const __m512d d_lo =
          _mm512_sub_pd(_mm512_mul_pd(s_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(q))), xd);
      const __m512d d_hi =
          _mm512_sub_pd(_mm512_mul_pd(s_hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(q, 1))), xd);
      err_lo = _mm512_add_pd(err_lo, _mm512_mul_pd(_mm512_mul_pd(m, d_lo), d_lo));
      err_hi = _mm512_add_pd(err_hi, _mm512_mul_pd(_mm512_mul_pd(m, d_hi), d_hi));
    }
    alignas(64) double out[16];
    _mm512_store_pd(out, err_lo);
    _mm512_store_pd(out + 8, err_hi);
    std::copy_n(out, live, errors + c0);
  }
}

void scale_candidates_avx512(float gmax, int half, double step, int imax, float* out) {
  const __m512d g = _mm512_set1_pd(static_cast<double>(gmax));
  const __m512d h = _mm512_set1_pd(static_cast<double>(half));
  const __m512d st = _mm512_set1_pd(step);
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512d sign = _mm512_set1_pd(-0.0);
  // f16(1e-5): 0x00a8 (a subnormal), as the scalar code computes it.
  const __m256 floor_f16 =
      _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_set1_ps(1e-5f), _MM_FROUND_TO_NEAREST_INT));
  const __m256 neg_floor = _mm256_sub_ps(_mm256_setzero_ps(), floor_f16);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int i0 = -imax; i0 <= imax; i0 += 8) {
    const int live = std::min(8, imax - i0 + 1);
    const __m512d i = _mm512_cvtepi32_pd(_mm256_add_epi32(_mm256_set1_epi32(i0), lane));
    // -(half - step * i) / gmax, then 1 / that: the negation flips the sign bit, as unary minus.
    const __m512d iscale =
        _mm512_div_pd(_mm512_xor_pd(_mm512_sub_pd(h, _mm512_mul_pd(st, i)), sign), g);
    const __m256 s32 = _mm512_cvtpd_ps(_mm512_div_pd(one, iscale));
    const __m256 s = _mm256_cvtph_ps(_mm256_cvtps_ph(s32, _MM_FROUND_TO_NEAREST_INT));
    // s < 0 ? min(s, -floor) : max(s, floor), with std::min/max's choice on ties and zeros.
    const __m256 pos = _mm256_blendv_ps(s, floor_f16, _mm256_cmp_ps(s, floor_f16, _CMP_LT_OQ));
    const __m256 neg = _mm256_blendv_ps(s, neg_floor, _mm256_cmp_ps(neg_floor, s, _CMP_LT_OQ));
    const __m256 r = _mm256_blendv_ps(pos, neg, _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_LT_OQ));
    _mm256_mask_storeu_ps(out + i0 + imax, static_cast<__mmask8>((1u << live) - 1), r);
  }
}

}  // namespace qs::kernels::cpu
