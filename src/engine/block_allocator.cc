// engine: BlockAllocator.
#include "engine/block_allocator.h"

#include <string>

#include "core/check.h"

namespace qs::engine {

BlockAllocator::BlockAllocator(int64_t n_blocks) : n_blocks_(n_blocks), in_use_(n_blocks, false) {
  QS_CHECK(n_blocks >= 0);
  free_.reserve(n_blocks);
  // Pushed in reverse so that block 0 is handed out first (readable tables in logs and tests).
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

Status BlockAllocator::allocate(int64_t n, std::vector<int32_t>* out) {
  QS_CHECK(n >= 0);
  if (n > n_free()) {
    return out_of_range("KV cache out of blocks: " + std::to_string(n) + " needed, " +
                        std::to_string(n_free()) + " of " + std::to_string(n_blocks_) + " free");
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[b] = true;
    out->push_back(b);
  }
  return ok_status();
}

void BlockAllocator::free(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    QS_CHECK_MSG(b >= 0 && b < n_blocks_ && in_use_[b], "freeing a block that is not allocated");
    in_use_[b] = false;
    free_.push_back(b);
  }
}

}  // namespace qs::engine
