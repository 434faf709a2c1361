// tests: the KV block allocator (free list, all-or-nothing allocation, out-of-blocks errors)
// and the KvCache's per-sequence block tables.
#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "engine/block_allocator.h"
#include "engine/kv_cache.h"

namespace qs::engine {
namespace {

TEST(BlockAllocator, HandsOutDistinctBlocksAndTakesThemBack) {
  BlockAllocator a(5);
  std::vector<int32_t> got;
  ASSERT_TRUE(a.allocate(3, &got).ok());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(std::set<int32_t>(got.begin(), got.end()).size(), 3u);
  for (int32_t b : got) EXPECT_TRUE(b >= 0 && b < 5);
  EXPECT_EQ(a.n_free(), 2);
  a.free({got[1]});
  EXPECT_EQ(a.n_free(), 3);
  std::vector<int32_t> again;
  ASSERT_TRUE(a.allocate(1, &again).ok());
  EXPECT_EQ(again[0], got[1]);  // most recently freed first
}

TEST(BlockAllocator, OutOfBlocksIsAnErrorAndTakesNothing) {
  BlockAllocator a(4);
  std::vector<int32_t> got;
  ASSERT_TRUE(a.allocate(3, &got).ok());
  Status s = a.allocate(2, &got);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("out of blocks"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("1 of 4 free"), std::string::npos) << s.message();
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(a.n_free(), 1);
}

KvCacheConfig small_config(int64_t n_blocks) {
  KvCacheConfig c;
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.n_blocks = n_blocks;
  c.block_size = 16;
  return c;
}

TEST(KvCache, TablesGrowByBlocksAndReleaseFreesThem) {
  KvCache cache(small_config(6));
  EXPECT_EQ(cache.size_bytes(), 2 * 2 * 6 * 16 * 2 * 4 * 4);
  ASSERT_TRUE(cache.reserve(7, 1).ok());
  EXPECT_EQ(cache.block_table(7).size(), 1u);
  ASSERT_TRUE(cache.reserve(7, 16).ok());
  EXPECT_EQ(cache.block_table(7).size(), 1u);
  ASSERT_TRUE(cache.reserve(7, 17).ok());
  EXPECT_EQ(cache.block_table(7).size(), 2u);
  ASSERT_TRUE(cache.reserve(9, 40).ok());
  EXPECT_EQ(cache.block_table(9).size(), 3u);
  EXPECT_EQ(cache.n_free_blocks(), 1);
  cache.release(7);
  EXPECT_FALSE(cache.has(7));
  EXPECT_EQ(cache.n_free_blocks(), 3);
  ASSERT_EQ(cache.layers().size(), 2u);
  EXPECT_EQ(cache.layers()[1].n_blocks, 6);
  EXPECT_NE(cache.layers()[0].k, cache.layers()[1].k);
}

TEST(KvCache, OutOfBlocksNamesTheSequenceAndKeepsItsTable) {
  KvCache cache(small_config(2));
  ASSERT_TRUE(cache.reserve(1, 20).ok());
  Status s = cache.reserve(1, 100);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("sequence 1"), std::string::npos) << s.message();
  EXPECT_EQ(cache.block_table(1).size(), 2u);
  Status fresh = cache.reserve(2, 1);
  ASSERT_FALSE(fresh.ok());
  EXPECT_FALSE(cache.has(2));
}

}  // namespace
}  // namespace qs::engine
