// ops: fused causal GQA self-attention with bf16 products over whole sequences (no KV cache, no
// padding mask, no window): the quantizer's calibration forward (quant/grad_ops.cc), in the
// rounding of torch's attention under bf16 autocast (Q, K, V and P rounded to bf16, sums in
// f32). Checks the call once and runs kernels/cpu/attention_bf16_avx512.cc, one (sequence, kv
// head) per task over the pool. There is no other kernel: callers keep their own path where
// causal_attention_bf16_runs() is false.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"

namespace qs::ops {

struct CausalAttentionShape {
  int64_t n_seqs = 0, seqlen = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0;  // of the scores; K is multiplied by it in f32 before its rounding to bf16
};

// Whether causal_attention_bf16 runs for this head_dim here: the active ISA is avx512, the CPU
// has AVX512-BF16, and head_dim is even and at most 256.
bool causal_attention_bf16_runs(int64_t head_dim);

// Query i of a sequence attends to its keys 0..i.
//   q [n_seqs * seqlen, n_heads * head_dim]; k, v [n_seqs * seqlen, n_kv_heads * head_dim];
//   out like q (may not alias q, k or v); lse [n_seqs, n_heads, seqlen]: each query's
//   log-sum-exp of its scaled scores, which a backward needs to recompute the probabilities.
// Fails where !causal_attention_bf16_runs(head_dim), on negative or zero head counts, n_heads
// not a multiple of n_kv_heads, or a null pointer; no sequences or tokens is a no-op.
Status causal_attention_bf16(const CausalAttentionShape& s, const float* q, const float* k,
                             const float* v, float* out, float* lse, ThreadPool& pool);

}  // namespace qs::ops
