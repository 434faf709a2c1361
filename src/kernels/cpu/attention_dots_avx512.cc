// kernels/cpu: sixteen attention scores per call (see attention_dots_cpu.h).
// GCC 12 reports its own AVX-512 shuffle intrinsics as reading an uninitialized __Y.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/attention_dots_cpu.h"
#include "kernels/cpu/kv_fp8_decode_avx512.h"

namespace qs::kernels::cpu {
namespace {

// 16 elements of a cache row as f32, times 1 / kScale (e4m3 decodes to the value / 256,
// exactly; the kernels multiply kScale back once per result, as the fp8 row loops do).
struct F32Row {
  using T = float;
  static constexpr float kScale = 1.0f;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
};
struct BF16Row {
  using T = uint16_t;
  static constexpr float kScale = 1.0f;
  static __m512 load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
struct E4M3Row {
  using T = uint8_t;
  static constexpr float kScale = 256.0f;
  static __m512 load(const uint8_t* p) { return e4m3_over_256(load_u8x16(p, 16)); }
};
struct E5M2Row {
  using T = uint8_t;
  static constexpr float kScale = 1.0f;
  static __m512 load(const uint8_t* p) { return e5m2(load_u8x16(p, 16)); }
};

// v[j] -> the vector whose element j is the sum of v[j]'s 16 elements. Stage 1 sums element
// pairs of two vectors per 128-bit lane, stage 2 finishes four vectors per lane, stage 3 adds
// the four lanes of four such vectors, transposing them with whole-lane shuffles.
__m512 reduce16(__m512 v[16]) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  // u[g], lane L: the partial sums over lane L of vectors 4g .. 4g + 3.
  for (int g = 0; g < 4; ++g) {
    u[g] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * g], t[2 * g + 1], 0x44),
                         _mm512_shuffle_ps(t[2 * g], t[2 * g + 1], 0xee));
  }
  const __m512 e =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x44), _mm512_shuffle_f32x4(u[0], u[1], 0xee));
  const __m512 f =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x44), _mm512_shuffle_f32x4(u[2], u[3], 0xee));
  return _mm512_add_ps(_mm512_shuffle_f32x4(e, f, 0x88), _mm512_shuffle_f32x4(e, f, 0xdd));
}

template <class Row>
void dots16(const float* q, const typename Row::T* k, int64_t stride, int n, int64_t hd,
            float* out) {
  // Keys past n repeat the last one: the same instructions run, their sums are dropped.
  const typename Row::T* rows[16];
  for (int j = 0; j < 16; ++j) rows[j] = k + (j < n ? j : n - 1) * stride;
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < hd; i += 16) {
    const __m512 qv = _mm512_loadu_ps(q + i);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(qv, Row::load(rows[j] + i), acc[j]);
  }
  const __mmask16 keep = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1);
  __m512 sums = reduce16(acc);
  if constexpr (Row::kScale != 1.0f) sums = _mm512_mul_ps(sums, _mm512_set1_ps(Row::kScale));
  _mm512_mask_storeu_ps(out, keep, sums);
}

// P output vectors (16 P columns of o from i0), the n keys in four interleaved partial sums:
// one chain alone is bound by the FMA latency, not its throughput.
template <class Row, int P>
void wsum_pass(const float* w, const typename Row::T* v, int64_t stride, int n, float* o) {
  __m512 acc[4][P];
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s)
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[s][p] = _mm512_setzero_ps();
  int j = 0;
  for (; j + 4 <= n; j += 4) {
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m512 ws = _mm512_set1_ps(w[j + s] * Row::kScale);
      const typename Row::T* vr = v + (j + s) * stride;
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p)
        acc[s][p] = _mm512_fmadd_ps(ws, Row::load(vr + 16 * p), acc[s][p]);
    }
  }
  for (; j < n; ++j) {
    const __m512 ws = _mm512_set1_ps(w[j] * Row::kScale);
    const typename Row::T* vr = v + j * stride;
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[0][p] = _mm512_fmadd_ps(ws, Row::load(vr + 16 * p), acc[0][p]);
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(acc[0][p], acc[1][p]), _mm512_add_ps(acc[2][p], acc[3][p]));
    _mm512_storeu_ps(o + 16 * p, _mm512_add_ps(_mm512_loadu_ps(o + 16 * p), sum));
  }
}

template <class Row>
void wsum16(const float* w, const typename Row::T* v, int64_t stride, int n, int64_t hd, float* o) {
  int64_t i = 0;
  for (; i + 64 <= hd; i += 64) wsum_pass<Row, 4>(w, v + i, stride, n, o + i);
  switch ((hd - i) / 16) {
    case 3:
      return wsum_pass<Row, 3>(w, v + i, stride, n, o + i);
    case 2:
      return wsum_pass<Row, 2>(w, v + i, stride, n, o + i);
    case 1:
      return wsum_pass<Row, 1>(w, v + i, stride, n, o + i);
    default:
      return;
  }
}

}  // namespace

void attn_wsum16_f32_avx512(const float* w, const float* v, int64_t stride, int n, int64_t hd,
                            float* o) {
  wsum16<F32Row>(w, v, stride, n, hd, o);
}

void attn_wsum16_bf16_avx512(const float* w, const uint16_t* v, int64_t stride, int n, int64_t hd,
                             float* o) {
  wsum16<BF16Row>(w, v, stride, n, hd, o);
}

void attn_dots16_f32_avx512(const float* q, const float* k, int64_t stride, int n, int64_t hd,
                            float* out) {
  dots16<F32Row>(q, k, stride, n, hd, out);
}

void attn_dots16_bf16_avx512(const float* q, const uint16_t* k, int64_t stride, int n, int64_t hd,
                             float* out) {
  dots16<BF16Row>(q, k, stride, n, hd, out);
}

void attn_dots16_e4m3_avx512(const float* q, const uint8_t* k, int64_t stride, int n, int64_t hd,
                             float* out) {
  dots16<E4M3Row>(q, k, stride, n, hd, out);
}

void attn_dots16_e5m2_avx512(const float* q, const uint8_t* k, int64_t stride, int n, int64_t hd,
                             float* out) {
  dots16<E5M2Row>(q, k, stride, n, hd, out);
}

void attn_wsum16_e4m3_avx512(const float* w, const uint8_t* v, int64_t stride, int n, int64_t hd,
                             float* o) {
  wsum16<E4M3Row>(w, v, stride, n, hd, o);
}

void attn_wsum16_e5m2_avx512(const float* w, const uint8_t* v, int64_t stride, int n, int64_t hd,
                             float* o) {
  wsum16<E5M2Row>(w, v, stride, n, hd, o);
}

}  // namespace qs::kernels::cpu
