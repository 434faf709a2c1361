// kernels/cpu: SIMD versions of the per-token ops, one set per ISA, each with exactly the
// semantics of its kernels/ref/elementwise_ref.h oracle (see ops/elementwise.h). exp() is a
// polynomial good to ~2 ulp; sums run in f32 lanes instead of one scalar chain.
#pragma once

#include <cstdint>

namespace qs::kernels::cpu {

void rms_norm_avx512(const float* x, int64_t m, int64_t d, const float* weight, float eps,
                     float* y);
void silu_mul_avx512(const float* gate, const float* up, int64_t n, float* out);
void rope_rotate_half_avx512(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                             const float* cos, const float* sin);
void softmax_avx512(float* x, int64_t n);
float exp_sub_avx512(const float* x, int64_t n, float shift, float* out);
void add_inplace_avx512(float* y, const float* x, int64_t n);
// x = x / 2 (1 + erf(x / sqrt 2)) with a rational erf within 4.2e-7 of the exact one.
void gelu_erf_avx512(float* x, int64_t n);

void rms_norm_avx2(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y);
void silu_mul_avx2(const float* gate, const float* up, int64_t n, float* out);
void rope_rotate_half_avx2(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                           const float* cos, const float* sin);
void softmax_avx2(float* x, int64_t n);
float exp_sub_avx2(const float* x, int64_t n, float shift, float* out);
void add_inplace_avx2(float* y, const float* x, int64_t n);
void gelu_erf_avx2(float* x, int64_t n);

}  // namespace qs::kernels::cpu
