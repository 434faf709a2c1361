// kernels/ref: scalar oracles for the per-token ops (RMSNorm, SiLU-gate, softmax, rotary
// embedding, residual add). Obvious loops; the SIMD versions in kernels/cpu are tested
// against these, and ops/elementwise.h documents the semantics.
#pragma once

#include <cstdint>

namespace qs::kernels::ref {

void rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
void rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                      const float* cos, const float* sin);
void softmax(float* x, int64_t n);
float exp_sub(const float* x, int64_t n, float shift, float* out);
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace qs::kernels::ref
