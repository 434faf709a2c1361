// kernels/cuda: the paged KV cache on the GPU: writing a batch's new keys and values into
// their cache slots, and causal grouped-query attention over the cache for a batch that mixes
// prefill chunks and decode steps (ops/attention.h's semantics, which the tests hold these
// to). The cache's layout and element codecs are the CPU's, byte for byte. Every pointer is
// device memory, the batch's descriptors included; nothing is checked here (the ops layer
// validates the batch on the host, where it builds the descriptors).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/device_runtime.h"

namespace qs::kernels::cuda {

// One layer of the cache (ops::PagedKvLayer):
//   k, v: [n_blocks, block_size, n_kv_heads, head_dim] of dtype: F32, BF16, F8_E4M3 or
//   F8_E5M2. fp8 stores x / scale, saturated, and reads stored * scale (vLLM's convention).
struct PagedKvCache {
  DType dtype = DType::kF32;
  void* k = nullptr;
  void* v = nullptr;
  int64_t block_size = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// One sequence of a batch (ops::AttentionSeq), as an element of a device array. Its new
// tokens are rows [query_start, query_start + n_query) of q, k, v and out, at positions
// start_pos ... start_pos + n_query - 1; token position p lives in cache block
// block_tables[block_table_offset + p / block_size], row p % block_size. The sequences of a
// batch tile [0, n_tokens) in order (each query_start is the previous one's end).
struct PagedSeq {
  int32_t query_start;
  int32_t n_query;
  int32_t start_pos;
  int32_t block_table_offset;
};
static_assert(sizeof(PagedSeq) == 16, "PagedSeq is copied to the device as it is");

// Stores the batch's new keys and values (k, v: [n_tokens, n_kv_heads, head_dim] f32, after
// RoPE for k) in their cache slots: divided by k_scale / v_scale and converted to the cache's
// dtype, bit for bit as ops::paged_kv_write (fp8 saturates).
CudaStatus paged_kv_write(const PagedKvCache& cache, const PagedSeq* seqs, int32_t n_seqs,
                          const int32_t* block_tables, const float* k, const float* v,
                          int64_t n_tokens, Stream stream);

// The largest head_dim the attention kernel takes (its per-thread accumulators are sized by it).
constexpr int64_t kMaxAttentionHeadDim = 256;
// Keys per partition when one query's keys are split over several blocks (flash-decoding).
constexpr int64_t kAttentionPartitionKeys = 512;

struct PagedAttentionArgs {
  const float* q = nullptr;  // [n_tokens, n_heads, head_dim]
  float* out = nullptr;      // [n_tokens, n_heads, head_dim]
  PagedKvCache cache;
  const PagedSeq* seqs = nullptr;
  int32_t n_seqs = 0;
  const int32_t* block_tables = nullptr;
  int64_t n_tokens = 0;
  int64_t n_heads = 0;         // a multiple of cache.n_kv_heads
  float scale = 1.0f;          // usually head_dim^-0.5
  int64_t sliding_window = 0;  // > 0: a query at p sees keys at positions > p - window
  int64_t max_seq_len = 0;     // the largest start_pos + n_query of the batch
  // Optional, paged_attention_workspace_bytes() of f32 scratch. With it, a query's keys are
  // split into partitions of kAttentionPartitionKeys, each its own block, merged by a second
  // kernel: what keeps the GPU busy when a decode batch has few (sequence, kv head) pairs and
  // long contexts. Without it (null), one block walks all of a query's keys.
  float* workspace = nullptr;
};

// How many partitions the keys are split into with a workspace: 1 means no split (and no
// workspace is needed or used).
int64_t paged_attention_partitions(int64_t max_seq_len, int64_t sliding_window);
size_t paged_attention_workspace_bytes(int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                       int64_t max_seq_len, int64_t sliding_window);

// out[t, h, :] = softmax(scale * q[t, h, :] . K[s, h / group, :]) V[s, h / group, :] over the
// cached positions s <= pos(t) of t's sequence inside the sliding window; the new tokens' keys
// and values must be in the cache (paged_kv_write) first. f32 accumulation, online softmax.
CudaStatus paged_attention(const PagedAttentionArgs& args, Stream stream);

}  // namespace qs::kernels::cuda
