// kernels/cpu: fp8 KV-cache row loops, AVX-512 (see kv_fp8_cpu.h).
// GCC 12's AVX-512 headers trip a false -Wuninitialized; see linear_avx512.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/kv_fp8_cpu.h"
#include "kernels/cpu/reduce_avx512.h"

namespace qs::kernels::cpu {
namespace {

// The first `n` (<= 16) bytes at p, zero-filled past them (a masked load never touches
// memory past the row).
inline __m256i load_u8x16(const uint8_t* p, int64_t n) {
  const __m128i b = n >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                            : _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << n) - 1), p);
  return _mm256_cvtepu8_epi16(b);
}

// e4m3 -> f32, times 1/256 (the caller multiplies the 256 back once). The magnitude bits
// moved up by 7 are an f16 whose exponent is 8 less than e4m3's bias allows for: exact for
// every normal and subnormal code. The NaN code (S.1111.111) would read 480/256: masked to
// NaN, as the scalar decoder reads it.
inline __m512 e4m3_over_256(__m256i w) {
  const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7f));
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8);
  const __m256i h = _mm256_or_si256(sign, _mm256_slli_epi16(mag, 7));
  const __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f));
  return _mm512_mask_mov_ps(_mm512_cvtph_ps(h), nan, _mm512_set1_ps(__builtin_nanf("")));
}

// e5m2 -> f32: the byte is an f16's top byte, infinities and NaNs included.
inline __m512 e5m2(__m256i w) {
  return _mm512_cvtph_ps(_mm256_slli_epi16(w, 8));
}

template <bool kE4M3>
inline __m512 decode(const uint8_t* p, int64_t n) {
  const __m256i w = load_u8x16(p, n);
  if constexpr (kE4M3) return e4m3_over_256(w);
  return e5m2(w);
}

template <bool kE4M3>
float dot(const float* q, const uint8_t* k, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), decode<kE4M3>(k + i, 16), acc);
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), decode<kE4M3>(k + i, n - i), acc);
  }
  const float s = reduce_add(acc);
  return kE4M3 ? s * 256.0f : s;
}

template <bool kE4M3>
void axpy(float a, const uint8_t* v, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(kE4M3 ? a * 256.0f : a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, decode<kE4M3>(v + i, 16), _mm512_loadu_ps(y + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 yv = _mm512_maskz_loadu_ps(m, y + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, decode<kE4M3>(v + i, n - i), yv));
  }
}

}  // namespace

float kv_dot_e4m3_avx512(const float* q, const uint8_t* k, int64_t n) {
  return dot<true>(q, k, n);
}
float kv_dot_e5m2_avx512(const float* q, const uint8_t* k, int64_t n) {
  return dot<false>(q, k, n);
}
void kv_axpy_e4m3_avx512(float a, const uint8_t* v, float* y, int64_t n) {
  axpy<true>(a, v, y, n);
}
void kv_axpy_e5m2_avx512(float a, const uint8_t* v, float* y, int64_t n) {
  axpy<false>(a, v, y, n);
}

}  // namespace qs::kernels::cpu
