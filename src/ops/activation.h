// ops: the activations and normalizations of the image pipeline's models (CLIP, T5, the FLUX
// transformer, the VAE). f32, in place or row-major; formulas in kernels/ref/activation_ref.h
// and norm_ref.h. These are a small fraction of a forward next to its matmuls and
// convolutions, so they run the scalar kernels; gelu_erf, a sixth of Whisper's encoder when
// scalar (libm's erff), has SIMD ones (kernels/cpu/elementwise_cpu.h).
#pragma once

#include <cstdint>

namespace qs::ops {

void gelu_erf(float* x, int64_t n);
void gelu_tanh(float* x, int64_t n);
void quick_gelu(float* x, int64_t n);
void silu(float* x, int64_t n);
void relu(float* x, int64_t n);

// y[i, :] = LayerNorm(x[i, :]) * weight + bias; weight/bias may be null. y may alias x.
void layer_norm(const float* x, int64_t m, int64_t d, const float* weight, const float* bias,
                float eps, float* y);

// x, y: [n, c, hw]; `groups` must divide c. y may alias x.
void group_norm(const float* x, int64_t n, int64_t c, int64_t hw, int64_t groups,
                const float* weight, const float* bias, float eps, float* y);

// Interleaved-pair rotary embedding in place (kernels/ref/rope_ref.h).
void rope_interleaved(float* x, int64_t n_tokens, int64_t stride, int64_t n_heads, int64_t head_dim,
                      const float* cos, const float* sin);

}  // namespace qs::ops
