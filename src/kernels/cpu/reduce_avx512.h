// kernels/cpu: horizontal reductions of AVX-512 registers, shared by the *_avx512.cc kernels,
// in a fixed order (halves, quarters, then within 128 bits). Only files compiled with the
// AVX-512 flags may include it.
#pragma once

#include <immintrin.h>

namespace qs::kernels::cpu {

inline float reduce_add(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 s = _mm512_castps512_ps128(v);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float reduce_max(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 s = _mm512_castps512_ps128(v);
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace qs::kernels::cpu
