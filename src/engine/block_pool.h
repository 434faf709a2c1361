// engine: the KV-cache block pool with prefix caching, as vLLM V1's BlockPool
// (docs/design/prefix_caching.md). Every block has a reference count: the number of running
// sequences whose block table holds it. A full block can be registered under the hash of its
// tokens chained to its parent block's hash; a later sequence whose prompt starts with the
// same tokens finds it and shares it (ref++), so that prefix is not computed again. Blocks
// with no reference sit in a free queue in LRU order: cached ones stay findable until a new
// allocation takes them, which evicts their hash.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace qs::engine {

// The hash of one full block: its tokens chained to the parent block's hash (0 for the first
// block), so equal hashes mean equal whole prefixes, not just equal blocks.
uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> tokens);

class BlockPool {
 public:
  // `enable_caching` false: register() is a no-op and find_cached() finds nothing.
  BlockPool(int64_t n_blocks, int64_t block_size, bool enable_caching);

  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  // Blocks no sequence references (cached or not): what allocate() can hand out.
  int64_t n_free() const { return n_free_; }
  int64_t n_used() const { return n_blocks_ - n_free_; }
  int32_t ref_count(int32_t block) const { return refs_[block]; }
  bool is_cached(int32_t block) const { return hashes_[block] != kNoHash; }

  // The longest run of cached blocks for the block hashes of a sequence, from the first.
  // `tokens` holds at least hashes.size() full blocks; each hit is checked against the tokens
  // and the parent hash it was registered with, so a 64-bit collision can never share K/V.
  // Touches nothing; pass the result to acquire().
  std::vector<int32_t> find_cached(std::span<const uint64_t> hashes,
                                   std::span<const int32_t> tokens) const;
  // ref++ on blocks found by find_cached(), taking the free ones out of the free queue.
  void acquire(std::span<const int32_t> blocks);
  // Takes `n` blocks from the head of the free queue (least recently freed first), evicting
  // their hashes, and appends them to `out` with a reference each. All or nothing: out of
  // range, naming the counts, when fewer than `n` are free.
  Status allocate(int64_t n, std::vector<int32_t>* out);
  // ref-- on each block in order; a block whose count reaches zero goes to the tail of the
  // free queue (callers pass a table in reverse so that its last blocks are evicted first).
  void release(std::span<const int32_t> blocks);
  // Registers a full, computed block under `hash` with its tokens and parent hash. A hash
  // already registered (another sequence computed the same prefix) keeps its first block.
  void register_block(int32_t block, uint64_t hash, uint64_t parent_hash,
                      std::span<const int32_t> tokens);

 private:
  static constexpr uint64_t kNoHash = 0;  // hash_block_tokens never returns 0
  static constexpr int32_t kNil = -1;

  void push_free_tail(int32_t block);
  void unlink_free(int32_t block);

  int64_t n_blocks_;
  int64_t block_size_;
  bool enable_caching_;
  int64_t n_free_ = 0;
  std::vector<int32_t> refs_;            // [n_blocks]
  std::vector<int32_t> prev_, next_;     // [n_blocks] free queue links (kNil: none)
  int32_t head_ = kNil, tail_ = kNil;    // free queue ends
  std::vector<uint64_t> hashes_;         // [n_blocks] registered hash or kNoHash
  std::vector<uint64_t> parent_hashes_;  // [n_blocks]
  std::vector<int32_t> block_tokens_;    // [n_blocks, block_size] tokens of cached blocks
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

}  // namespace qs::engine
