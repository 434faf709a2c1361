// engine: how many bytes the KV cache may take, decided once after the weights are loaded
// (vLLM sizes its cache the same way, from --gpu-memory-utilization). The cache holds K and
// V for every layer in its dtype (--kv-cache-dtype), so a token costs
// 2 x dtype_size x n_layers x n_kv_heads x head_dim bytes: 4 for auto (f32), 2 for bf16, 1
// for fp8.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "core/status.h"
#include "models/model_config.h"

namespace qs::engine {

// K and V bytes one token takes over all layers.
int64_t kv_cache_bytes_per_token(const models::ModelConfig& config,
                                 DType cache_dtype = DType::kF32);

// MemAvailable from /proc/meminfo: what the kernel can hand out without swapping.
Result<int64_t> available_memory_bytes();

// `fraction` (0, 1] of the memory available now: a server's budget, the CPU counterpart of
// vLLM's --gpu-memory-utilization (taken of what is free after loading, since on CPU the
// weights' pages are not ours to count).
Result<int64_t> kv_cache_bytes_from_memory_fraction(double fraction);

// The bytes for `n_tokens` tokens in whole blocks of `block_size`, for callers that know how
// long their requests are (the CLI). A cache that would need more than half of this machine's
// memory is an error that says so, never an out-of-memory kill.
Result<int64_t> kv_cache_bytes_for_tokens(const models::ModelConfig& config, int64_t n_tokens,
                                          int64_t block_size = 16, DType cache_dtype = DType::kF32);

// How a server's KV cache is sized, for a cache shared by requests of unknown length: `serve`
// and the Python LLM both size theirs here, so the same flags and keywords give the same cache.
struct ServingKvCacheSize {
  std::optional<int64_t> bytes;           // serve's --kv-cache-memory: exactly this (> 0)
  std::optional<double> memory_fraction;  // --gpu-memory-utilization, of the memory available
  int64_t max_model_len = 0;              // the engine's, as it will run
  int64_t max_num_seqs = 0;
  int64_t block_size = 16;
  DType cache_dtype = DType::kF32;
};

// `bytes` when set, else `memory_fraction` of the memory available now, else what
// max_num_seqs sequences of max_model_len (plus a partly filled block each) need, capped at a
// quarter of the available memory so that a small model does not take the host, and never
// below one such sequence, so that the longest request allowed fits.
Result<int64_t> serving_kv_cache_bytes(const models::ModelConfig& config,
                                       const ServingKvCacheSize& size);

}  // namespace qs::engine
