// engine: the pool of KV-cache block ids. A free list hands out block ids and takes them back;
// running out is an error value the scheduler can act on (wait, preempt), never a crash.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace qs::engine {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t n_blocks);

  int64_t n_blocks() const { return n_blocks_; }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }

  // Takes `n` blocks and appends their ids to `out`, all or nothing. Error (out of range)
  // when fewer than `n` are free.
  Status allocate(int64_t n, std::vector<int32_t>* out);
  // Returns blocks to the pool. Freeing an id that is not allocated is a bug of the caller.
  void free(const std::vector<int32_t>& blocks);

 private:
  int64_t n_blocks_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first
  std::vector<bool> in_use_;   // [n_blocks]
};

}  // namespace qs::engine
