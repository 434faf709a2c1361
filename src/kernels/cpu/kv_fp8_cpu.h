// kernels/cpu: the inner loops of paged attention over an fp8 KV cache row (e4m3 or e5m2
// bytes), with the bytes widened to f32 in registers: one dot product with a query row and
// one y += a * row. GCC does not vectorise the fp8 -> f32 conversion of ops/kv_codec.h, so
// the AVX-512 build does it by hand: 16 bytes -> 16 u16 (vpmovzxbw) -> f16 bit patterns
// (e5m2 is an f16's top byte; e4m3 shifted into f16's fields is the value / 256, exact for
// subnormals too) -> vcvtph2ps. Results equal the scalar decoders' (ops::KvFp8E4M3 / E5M2).
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

#if QS_X86  // the kernels are AVX-512 ones (CMakeLists.txt)
namespace qs::kernels::cpu {

// sum_i q[i] * fp8(k[i]), n elements.
float kv_dot_e4m3_avx512(const float* q, const uint8_t* k, int64_t n);
float kv_dot_e5m2_avx512(const float* q, const uint8_t* k, int64_t n);
// y[i] += a * fp8(v[i]), n elements.
void kv_axpy_e4m3_avx512(float a, const uint8_t* v, float* y, int64_t n);
void kv_axpy_e5m2_avx512(float a, const uint8_t* v, float* y, int64_t n);

}  // namespace qs::kernels::cpu
#endif  // QS_X86
