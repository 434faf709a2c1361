// ops: dense multi-head attention for encoders and diffusion transformers (no KV cache):
// per head and block of queries, scores = Q K^T by the f32 GEMM, a softmax with the causal
// mask or additive bias, then P V by the GEMM; blocks run on the thread pool. The scalar
// oracle is kernels/ref/dense_attention_ref.h, whose header documents the layout.
#pragma once

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/ref/dense_attention_ref.h"

namespace qs::ops {

using DenseAttentionShape = kernels::ref::DenseAttentionShape;

// out may not alias q, k or v. Fails on non-positive sizes or strides shorter than a row.
Status dense_attention(const float* q, const float* k, const float* v, const DenseAttentionShape& s,
                       float* out, ThreadPool& pool);

}  // namespace qs::ops
