// tests: the prefix-caching block pool: the hash chain, reference counts, the LRU free queue
// and eviction of cached blocks when a fresh block is needed.
#include <vector>

#include <gtest/gtest.h>

#include "engine/block_pool.h"

namespace qs::engine {
namespace {

constexpr int64_t kBs = 4;

TEST(BlockHash, ChainsTheParentAndEveryToken) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 4, 3};
  const uint64_t ha = hash_block_tokens(0, a);
  EXPECT_EQ(ha, hash_block_tokens(0, a));
  EXPECT_NE(ha, hash_block_tokens(0, b));   // order matters
  EXPECT_NE(ha, hash_block_tokens(ha, a));  // same block after another prefix
  EXPECT_NE(hash_block_tokens(ha, b), hash_block_tokens(hash_block_tokens(0, b), b));
  EXPECT_NE(ha, 0u);
}

// Registers the full blocks of `tokens` (one table block per kBs tokens) and returns hashes.
std::vector<uint64_t> register_all(BlockPool& pool, const std::vector<int32_t>& table,
                                   const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> hashes;
  uint64_t parent = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    std::span<const int32_t> blk(tokens.data() + i * kBs, kBs);
    const uint64_t h = hash_block_tokens(parent, blk);
    pool.register_block(table[i], h, parent, blk);
    hashes.push_back(h);
    parent = h;
  }
  return hashes;
}

TEST(BlockPool, SharedBlocksAreCountedAndStayCachedWhenFree) {
  BlockPool pool(6, kBs, true);
  std::vector<int32_t> table;
  ASSERT_TRUE(pool.allocate(3, &table).ok());
  EXPECT_EQ(table, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.n_free(), 3);
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const std::vector<uint64_t> hashes = register_all(pool, table, tokens);

  // A second sequence with the same first two blocks and a different third finds two.
  std::vector<int32_t> other = tokens;
  other[9] = 99;
  std::vector<uint64_t> other_hashes = hashes;
  other_hashes[2] = hash_block_tokens(hashes[1], std::span<const int32_t>(other).subspan(8, 4));
  std::vector<int32_t> hits = pool.find_cached(other_hashes, other);
  EXPECT_EQ(hits, (std::vector<int32_t>{0, 1}));
  pool.acquire(hits);
  EXPECT_EQ(pool.ref_count(0), 2);
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.n_free(), 3);  // shared blocks take no extra room

  // The first sequence ends: its blocks lose one reference; block 2 becomes free but cached.
  pool.release(std::vector<int32_t>{2, 1, 0});
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.n_free(), 4);
  EXPECT_TRUE(pool.is_cached(2));
  EXPECT_EQ(pool.find_cached(hashes, tokens), (std::vector<int32_t>{0, 1, 2}));
  // Reviving the free cached block takes it out of the free queue.
  pool.acquire(std::vector<int32_t>{2});
  EXPECT_EQ(pool.n_free(), 3);
  EXPECT_EQ(pool.ref_count(2), 1);
}

TEST(BlockPool, TokensAreCheckedNotJustHashes) {
  BlockPool pool(2, kBs, true);
  std::vector<int32_t> table;
  ASSERT_TRUE(pool.allocate(1, &table).ok());
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const uint64_t h = hash_block_tokens(0, tokens);
  pool.register_block(table[0], h, 0, tokens);
  // Same hash presented with other tokens (a forged collision) finds nothing.
  EXPECT_TRUE(pool.find_cached(std::vector<uint64_t>{h}, std::vector<int32_t>{1, 2, 3, 5}).empty());
  EXPECT_EQ(pool.find_cached(std::vector<uint64_t>{h}, tokens).size(), 1u);
}

TEST(BlockPool, EvictsTheLeastRecentlyFreedCachedBlockFirst) {
  BlockPool pool(3, kBs, true);
  std::vector<int32_t> table;
  ASSERT_TRUE(pool.allocate(3, &table).ok());
  std::vector<int32_t> tokens(12);
  for (int i = 0; i < 12; ++i) tokens[i] = i;
  const std::vector<uint64_t> hashes = register_all(pool, table, tokens);
  // Freed in reverse (the engine's order): block 2 first, so block 2 is evicted first.
  pool.release(std::vector<int32_t>{2, 1, 0});
  EXPECT_EQ(pool.n_free(), 3);
  std::vector<int32_t> fresh;
  ASSERT_TRUE(pool.allocate(1, &fresh).ok());
  EXPECT_EQ(fresh, std::vector<int32_t>{2});
  EXPECT_FALSE(pool.is_cached(2));
  // The first two blocks of the prefix are still found; the third is gone.
  EXPECT_EQ(pool.find_cached(hashes, tokens), (std::vector<int32_t>{0, 1}));
  ASSERT_TRUE(pool.allocate(1, &fresh).ok());
  EXPECT_EQ(fresh.back(), 1);
  EXPECT_EQ(pool.find_cached(hashes, tokens), (std::vector<int32_t>{0}));
  // Out of blocks is an error that takes nothing.
  Status s = pool.allocate(2, &fresh);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(fresh.size(), 2u);
  EXPECT_EQ(pool.n_free(), 1);
}

TEST(BlockPool, WithoutCachingNothingIsFound) {
  BlockPool pool(2, kBs, false);
  std::vector<int32_t> table;
  ASSERT_TRUE(pool.allocate(1, &table).ok());
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const uint64_t h = hash_block_tokens(0, tokens);
  pool.register_block(table[0], h, 0, tokens);
  EXPECT_FALSE(pool.is_cached(table[0]));
  EXPECT_TRUE(pool.find_cached(std::vector<uint64_t>{h}, tokens).empty());
}

}  // namespace
}  // namespace qs::engine
