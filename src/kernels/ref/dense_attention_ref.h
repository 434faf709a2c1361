// kernels/ref: multi-head attention over a whole sequence held in memory (no KV cache), the
// form encoders and diffusion transformers use: every query sees every key, unless causal
// (CLIP's text encoder); an optional additive bias per head (T5's relative positions).
// The scalar oracle for ops/dense_attention.h.
#pragma once

#include <cstdint>

namespace qs::kernels::ref {

struct DenseAttentionShape {
  int64_t n_q, n_kv;  // query and key/value rows
  int64_t n_heads, head_dim;
  // Row strides (floats) of q, k, v and out; head h of row t starts at t * stride + h * head_dim.
  int64_t q_stride, k_stride, v_stride, out_stride;
  float scale;                  // usually head_dim^-0.5 (T5: 1)
  bool causal = false;          // query t sees keys s <= t
  const float* bias = nullptr;  // [n_heads, n_q, n_kv] added to the scores, or null
};

void dense_attention(const float* q, const float* k, const float* v, const DenseAttentionShape& s,
                     float* out);

}  // namespace qs::kernels::ref
