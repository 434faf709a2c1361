// kernels/cpu: fp8 KV-cache row loops, AVX-512 (see kv_fp8_cpu.h).
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*(), which
// -Wuninitialized flags once inlined (a false positive of GCC 12).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/kv_fp8_cpu.h"
#include "kernels/cpu/kv_fp8_decode_avx512.h"
#include "kernels/cpu/reduce_avx512.h"

namespace qs::kernels::cpu {
namespace {

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
