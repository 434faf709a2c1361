// kernels/ref: rotary embedding on interleaved pairs (x[2i], x[2i+1]), the convention of
// FLUX (diffusers' apply_rotary_emb with use_real_unbind_dim=-1) and of the original RoFormer,
// unlike the rotate-half one of HF Llama (ops/elementwise.h).
#pragma once

#include <cstdint>

namespace qs::kernels::ref {

// In place: x [n_tokens, n_heads, head_dim] with row stride `stride` floats; cos, sin
// [n_tokens, head_dim / 2] (one angle per pair):
//   (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin).
void rope_interleaved(float* x, int64_t n_tokens, int64_t stride, int64_t n_heads, int64_t head_dim,
                      const float* cos, const float* sin);

}  // namespace qs::kernels::ref
