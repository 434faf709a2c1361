// engine: the paged KV cache. Owns, per layer, K and V storage of [n_blocks, block_size,
// n_kv_heads, head_dim] in the cache dtype (--kv-cache-dtype: f32 for `auto`, bf16, fp8 e4m3
// or e5m2 with per-layer k/v scales) and the block table of every live sequence. Sequences grow
// block by block and give their blocks back when they end; running out of blocks is an error naming
// the sequence and the counts. The storage is the model's backend's (ops/backend.h): the
// paged attention of that backend reads it where it lives.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "engine/block_allocator.h"
#include "ops/attention.h"
#include "ops/backend.h"

namespace qs::engine {

// vLLM's --kv-cache-dtype: "auto" is the compute dtype, f32 here (vLLM's is the model's
// dtype; ours computes attention in f32 whatever the weights are), "bfloat16", and "fp8"
// (= "fp8_e4m3", as on CUDA) or "fp8_e5m2". Anything else is an error listing the choices.
Result<DType> parse_kv_cache_dtype(std::string_view name);
// The flag's spelling of a cache dtype ("auto" for F32).
const char* kv_cache_dtype_name(DType t);

struct KvCacheConfig {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;  // tokens per block, as vLLM's default
  DType dtype = DType::kF32;
  // [n_layers] each, or empty for 1.0: the fp8 scales (stored = fp8(x / scale)).
  std::vector<float> k_scales = {}, v_scales = {};
};

class KvCache {
 public:
  // Running out of the backend's memory throws std::bad_alloc, as a host allocation does
  // (budgets are checked before, engine/memory_budget.h).
  explicit KvCache(const KvCacheConfig& config, ops::Backend& backend = ops::cpu_backend());

  const KvCacheConfig& config() const { return config_; }
  int64_t n_free_blocks() const { return allocator_.n_free(); }
  // Bytes of K and V storage over all layers.
  int64_t size_bytes() const;

  // Makes the block table of `seq_id` (created on first use) cover `n_tokens` tokens.
  // Out of blocks: an out-of-range error, and the table is left as it was.
  Status reserve(int64_t seq_id, int64_t n_tokens);
  // Gives the sequence's blocks back and forgets it; unknown ids are ignored.
  void release(int64_t seq_id);
  bool has(int64_t seq_id) const { return tables_.count(seq_id) > 0; }
  // The block table of a live sequence (QS_CHECKed).
  const std::vector<int32_t>& block_table(int64_t seq_id) const;

  // One view per layer for Model::forward.
  const std::vector<ops::PagedKvLayer>& layers() const { return views_; }

 private:
  KvCacheConfig config_;
  BlockAllocator allocator_;
  std::vector<Tensor> k_, v_;  // [n_layers] x [n_blocks, block_size, n_kv_heads, head_dim]
  std::vector<ops::PagedKvLayer> views_;
  std::map<int64_t, std::vector<int32_t>> tables_;
};

}  // namespace qs::engine
