// kernels/cpu: the score loop of paged attention, sixteen keys at a time. A key row of a
// block lies at a fixed stride from the next (the cache is [block][slot][kv head][head_dim]),
// so the dot products of one query row with up to 16 keys run as 16 vector accumulators that
// one transposing tree of adds reduces into a single vector, instead of a horizontal sum per
// key. Each key's sum is formed in the same order whatever n is, so a score does not depend
// on which keys share its call (prefill, decode and flash-decoding parts agree bit for bit).
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

#if QS_X86  // the kernels are AVX-512 ones (CMakeLists.txt)
namespace qs::kernels::cpu {

// out[j] = sum_i q[i] * k[j * stride + i] for j < n (1 <= n <= 16); hd a multiple of 16.
void attn_dots16_f32_avx512(const float* q, const float* k, int64_t stride, int n, int64_t hd,
                            float* out);
// The same over a bf16 cache (widened exactly to f32) and the fp8 ones (decoded exactly, as
// ops::KvFp8E4M3 / E5M2 do).
void attn_dots16_bf16_avx512(const float* q, const uint16_t* k, int64_t stride, int n, int64_t hd,
                             float* out);

// o[i] += sum_j w[j] * v[j * stride + i] for j < n (1 <= n <= 16); hd a multiple of 16, at
// most 256. The sum stays in registers across the n keys (one load and one store of o per
// call, not one per key), in four interleaved partial sums added to o at the end: the order
// differs from one axpy per key by float rounding only, and depends only on n.
void attn_wsum16_f32_avx512(const float* w, const float* v, int64_t stride, int n, int64_t hd,
                            float* o);
void attn_wsum16_bf16_avx512(const float* w, const uint16_t* v, int64_t stride, int n, int64_t hd,
                             float* o);

void attn_dots16_e4m3_avx512(const float* q, const uint8_t* k, int64_t stride, int n, int64_t hd,
                             float* out);
void attn_dots16_e5m2_avx512(const float* q, const uint8_t* k, int64_t stride, int n, int64_t hd,
                             float* out);
void attn_wsum16_e4m3_avx512(const float* w, const uint8_t* v, int64_t stride, int n, int64_t hd,
                             float* o);
void attn_wsum16_e5m2_avx512(const float* w, const uint8_t* v, int64_t stride, int n, int64_t hd,
                             float* o);

}  // namespace qs::kernels::cpu
#endif  // QS_X86
