// kernels/cpu: fp8 (e4m3, e5m2) bytes to f32 in AVX-512 registers, shared by the fp8 row
// loops (kv_fp8_avx512.cc) and the sixteen-key attention kernels (attention_dots_avx512.cc).
// Include only from files compiled with the AVX-512 flags (suffix _avx512.cc).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace qs::kernels::cpu {

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

}  // namespace qs::kernels::cpu
