// engine: BlockPool (see block_pool.h). The free queue is an intrusive doubly linked list
// over block ids, so taking a cached block out of the middle when a prefix hit revives it
// is O(1), as in vLLM's FreeKVCacheBlockQueue.
#include "engine/block_pool.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace qs::engine {

uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> tokens) {
  // splitmix64's finaliser over a running state: every token and the parent move all bits.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(parent_hash ^ 0x5bd1e995ull);
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h == 0 ? 1 : h;  // 0 means "not cached" in the pool
}

BlockPool::BlockPool(int64_t n_blocks, int64_t block_size, bool enable_caching)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      enable_caching_(enable_caching),
      refs_(n_blocks, 0),
      prev_(n_blocks, kNil),
      next_(n_blocks, kNil),
      hashes_(n_blocks, kNoHash),
      parent_hashes_(n_blocks, 0) {
  QS_CHECK(n_blocks >= 0 && block_size > 0);
  if (enable_caching_) block_tokens_.assign(n_blocks * block_size, 0);
  // Block 0 is handed out first (readable tables in logs and tests).
  for (int32_t b = 0; b < n_blocks; ++b) push_free_tail(b);
}

void BlockPool::push_free_tail(int32_t block) {
  prev_[block] = tail_;
  next_[block] = kNil;
  if (tail_ != kNil) {
    next_[tail_] = block;
  } else {
    head_ = block;
  }
  tail_ = block;
  ++n_free_;
}

void BlockPool::unlink_free(int32_t block) {
  if (prev_[block] != kNil) {
    next_[prev_[block]] = next_[block];
  } else {
    head_ = next_[block];
  }
  if (next_[block] != kNil) {
    prev_[next_[block]] = prev_[block];
  } else {
    tail_ = prev_[block];
  }
  prev_[block] = next_[block] = kNil;
  --n_free_;
}

std::vector<int32_t> BlockPool::find_cached(std::span<const uint64_t> hashes,
                                            std::span<const int32_t> tokens) const {
  std::vector<int32_t> hits;
  if (!enable_caching_) return hits;
  QS_CHECK(tokens.size() >= hashes.size() * block_size_);
  uint64_t parent = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto it = by_hash_.find(hashes[i]);
    if (it == by_hash_.end()) break;
    const int32_t b = it->second;
    const auto want = tokens.subspan(i * block_size_, block_size_);
    if (parent_hashes_[b] != parent ||
        !std::equal(want.begin(), want.end(), block_tokens_.begin() + b * block_size_)) {
      break;
    }
    hits.push_back(b);
    parent = hashes[i];
  }
  return hits;
}

void BlockPool::acquire(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    QS_CHECK(b >= 0 && b < n_blocks_);
    if (refs_[b]++ == 0) unlink_free(b);
  }
}

Status BlockPool::allocate(int64_t n, std::vector<int32_t>* out) {
  QS_CHECK(n >= 0);
  if (n > n_free_) {
    return out_of_range("KV cache out of blocks: " + std::to_string(n) + " needed, " +
                        std::to_string(n_free_) + " of " + std::to_string(n_blocks_) + " free");
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = head_;
    unlink_free(b);
    if (hashes_[b] != kNoHash) {  // evict: the block's old content is about to be overwritten
      by_hash_.erase(hashes_[b]);
      hashes_[b] = kNoHash;
    }
    refs_[b] = 1;
    out->push_back(b);
  }
  return ok_status();
}

void BlockPool::release(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    QS_CHECK_MSG(b >= 0 && b < n_blocks_ && refs_[b] > 0, "releasing a block nobody holds");
    if (--refs_[b] == 0) push_free_tail(b);
  }
}

void BlockPool::register_block(int32_t block, uint64_t hash, uint64_t parent_hash,
                               std::span<const int32_t> tokens) {
  if (!enable_caching_ || hashes_[block] != kNoHash) return;
  QS_CHECK(static_cast<int64_t>(tokens.size()) == block_size_ && hash != kNoHash);
  if (!by_hash_.emplace(hash, block).second) return;
  hashes_[block] = hash;
  parent_hashes_[block] = parent_hash;
  std::copy(tokens.begin(), tokens.end(), block_tokens_.begin() + block * block_size_);
}

}  // namespace qs::engine
