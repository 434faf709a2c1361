// engine: the paged KV cache. Owns, per layer, K and V storage of [n_blocks, block_size,
// n_kv_heads, head_dim] (f32 now; the dtype field of ops::PagedKvLayer is where fp8 goes) and
// the block table of every live sequence. Sequences grow block by block and give their blocks
// back when they end; running out of blocks is an error naming the sequence and the counts.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/block_allocator.h"
#include "ops/attention.h"

namespace qs::engine {

struct KvCacheConfig {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;  // tokens per block, as vLLM's default
};

class KvCache {
 public:
  explicit KvCache(const KvCacheConfig& config);

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
