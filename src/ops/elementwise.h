// ops: the small per-token operations of a transformer block. All f32, row-major; norm
// weights and biases are converted to f32 when the model loads.
#pragma once

#include <cstdint>

namespace qs::ops {

// y[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight, for m rows of d (HF LlamaRMSNorm:
// the mean is taken in f32). y may alias x.
void rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y);

// out[i] = silu(gate[i]) * up[i]; out may alias gate.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// Rotary embedding in the Hugging Face rotate-half convention, in place:
//   x: [n_tokens, n_heads, head_dim]; cos, sin: [n_tokens, head_dim / 2].
//   x1 = x[..., :half], x2 = x[..., half:]  ->  (x1 cos - x2 sin, x2 cos + x1 sin).
void rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                      const float* cos, const float* sin);

// In-place numerically stable softmax over n values.
void softmax(float* x, int64_t n);

// out[i] = exp(x[i] - shift) (when out is not null; it may alias x), returning the sum of
// those values: the two passes of a softmax whose maximum or log-sum-exp the caller keeps
// (the quantizer's attention, whose backward recomputes the probabilities from it).
float exp_sub(const float* x, int64_t n, float shift, float* out);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace qs::ops
