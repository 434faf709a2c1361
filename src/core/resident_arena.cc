// core: alloc_resident (see resident_arena.h).
#include "core/resident_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace qs {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kChunk = size_t{64} << 20;

struct Chunk {
  uint8_t* base = nullptr;
  size_t size = 0;
  size_t used = 0;
  ~Chunk() { std::free(base); }
};

std::mutex g_mutex;
std::shared_ptr<Chunk> g_current;  // the chunk new allocations are carved from

std::shared_ptr<Chunk> new_chunk(size_t bytes) {
  auto chunk = std::make_shared<Chunk>();
  chunk->size = (std::max(bytes, kChunk) + kHugePage - 1) / kHugePage * kHugePage;
  chunk->base = static_cast<uint8_t*>(std::aligned_alloc(kHugePage, chunk->size));
  if (chunk->base == nullptr) return nullptr;
  // Advice only: where THP is off this is a no-op and the memory still works.
  madvise(chunk->base, chunk->size, MADV_HUGEPAGE);
  return chunk;
}

}  // namespace

std::shared_ptr<uint8_t[]> alloc_resident(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_current == nullptr || g_current->size - g_current->used < bytes) {
    std::shared_ptr<Chunk> chunk = new_chunk(bytes);
    if (chunk == nullptr) return nullptr;
    // A request bigger than a chunk gets one of its own; the current chunk keeps serving the
    // small ones.
    if (bytes >= kChunk && g_current != nullptr) {
      chunk->used = bytes;
      return std::shared_ptr<uint8_t[]>(chunk, chunk->base);
    }
    g_current = std::move(chunk);
  }
  uint8_t* p = g_current->base + g_current->used;
  g_current->used += bytes;
  // Aliasing: the allocation keeps its chunk alive.
  return std::shared_ptr<uint8_t[]>(g_current, p);
}

}  // namespace qs
