// ops: causal grouped-query attention over a paged KV cache, for a batch that mixes prefill
// chunks and decode steps of several sequences (vLLM's paged attention). Validates the batch
// against the cache once per call, then runs the scalar reference or the fast version, which
// reads each K/V row once per group of query heads and splits (token, kv head) pairs over the
// thread pool.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace qs::ops {

// One layer of a paged KV cache; the engine's KvCache owns the storage.
//   k, v: [n_blocks, block_size, n_kv_heads, head_dim] of `dtype`.
// Token t of a sequence lives in block block_table[t / block_size], row t % block_size.
// dtype: F32, BF16, F8_E4M3 or F8_E5M2 (ops/kv_codec.h). The fp8 ones carry vLLM's per-layer
// scales: a key is stored as fp8(k / k_scale) and read as fp8 * k_scale (likewise v); the
// kernels read the stored bytes and convert in registers.
struct PagedKvLayer {
  DType dtype = DType::kF32;
  void* k = nullptr;
  void* v = nullptr;
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Whether the attention kernels compute on a cache of `t`.
bool kv_cache_dtype_supported(DType t);

// One sequence's part of a batched call. Its query rows are [query_start, query_start +
// n_query) of q/out and of the new k/v rows; they sit at positions start_pos ... start_pos +
// n_query - 1, and positions below start_pos are already in the cache.
struct AttentionSeq {
  int64_t query_start = 0;
  int64_t n_query = 0;
  int64_t start_pos = 0;
  std::span<const int32_t> block_table;  // must cover start_pos + n_query tokens
};

struct AttentionParams {
  int64_t n_heads = 0;         // query heads; a multiple of the cache's n_kv_heads
  float scale = 1.0f;          // usually head_dim^-0.5
  int64_t sliding_window = 0;  // > 0: a query at p sees keys at positions > p - window
};

// Checks that the sequences tile [0, n_tokens) without overlap, that every block table covers
// its sequence with block ids of the cache, and that the cache is of a dtype we compute on.
Status validate_paged_batch(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs,
                            int64_t n_tokens);

// Stores the new tokens' keys and values in their cache slots, converted to the cache's dtype
// (divided by k_scale / v_scale first; fp8 saturates, as vLLM's cache writes do).
//   k, v: [n_tokens, n_kv_heads, head_dim] f32 (after RoPE for k).
void paged_kv_write(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs, const float* k,
                    const float* v);

// out[t, h, :] = softmax(scale * q[t, h, :] . K[s, h / group, :]) V[s, h / group, :] over the
// cached positions s <= pos(t) of t's sequence (and inside the sliding window).
//   q, out: [n_tokens, n_heads, head_dim] f32. The new tokens' K/V must be written first.
Status paged_attention(const float* q, const PagedKvLayer& cache,
                       std::span<const AttentionSeq> seqs, const AttentionParams& params,
                       float* out, ThreadPool& pool);

// The scalar oracle for paged_attention: one query head at a time, nothing clever; cache
// elements are read with core/dtype.h's scalar decoders (not kv_codec.h) times the scale.
Status paged_attention_ref(const float* q, const PagedKvLayer& cache,
                           std::span<const AttentionSeq> seqs, const AttentionParams& params,
                           float* out);

}  // namespace qs::ops
