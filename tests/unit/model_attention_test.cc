// tests: paged attention. The scalar reference is checked against dense causal attention
// over contiguous K/V (scattered over shuffled blocks), and the fast threaded version against
// the reference, with GQA, a sliding window and a batch that mixes prefill and decode.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "ops/attention.h"
#include "ops/elementwise.h"

namespace qs::ops {
namespace {

constexpr int64_t kKvHeads = 2, kHeads = 6, kBlocks = 32;

struct Fixture {
  // Per sequence: tokens already cached, new tokens.
  std::vector<std::pair<int64_t, int64_t>> shapes = {{0, 21}, {40, 1}, {9, 7}, {0, 1}};
  // 12 takes the portable loops; multiples of 16 the AVX-512 sixteen-key kernels.
  int64_t block = 16, head_dim = 12;
  std::vector<float> k_cache, v_cache;
  PagedKvLayer cache;
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSeq> seqs;
  // Dense copies per sequence: [len, kv_heads, head_dim], and q of the new tokens.
  std::vector<std::vector<float>> dense_k, dense_v;
  std::vector<float> q;
  int64_t n_tokens = 0;

  Fixture() { fill(); }
  explicit Fixture(std::vector<std::pair<int64_t, int64_t>> seq_shapes, int64_t block_size = 16,
                   int64_t dim = 12)
      : shapes(seq_shapes), block(block_size), head_dim(dim) {
    fill();
  }

  void fill() {
    std::mt19937 rng(3);
    std::normal_distribution<float> noise;
    int64_t n_blocks = kBlocks;  // at least; more when short blocks need them
    int64_t needed = 0;
    for (auto [start, n] : shapes) needed += (start + n + block - 1) / block;
    n_blocks = std::max(n_blocks, needed);
    k_cache.assign(n_blocks * block * kKvHeads * head_dim, NAN);
    v_cache = k_cache;
    cache = {DType::kF32, k_cache.data(), v_cache.data(), n_blocks, block, kKvHeads, head_dim};
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next_block = 0;
    const int64_t row = kKvHeads * head_dim;
    for (auto [start, n] : shapes) {
      const int64_t len = start + n;
      std::vector<int32_t> table;
      for (int64_t b = 0; b < (len + block - 1) / block; ++b) table.push_back(ids[next_block++]);
      tables.push_back(table);
      std::vector<float> k(len * row), v(len * row);
      for (auto& x : k) x = noise(rng);
      for (auto& x : v) x = noise(rng);
      for (int64_t p = 0; p < len; ++p) {
        const int64_t slot = table[p / block] * block + p % block;
        std::copy_n(k.data() + p * row, row, k_cache.data() + slot * row);
        std::copy_n(v.data() + p * row, row, v_cache.data() + slot * row);
      }
      dense_k.push_back(k);
      dense_v.push_back(v);
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      seqs.push_back({n_tokens, shapes[i].second, shapes[i].first, tables[i]});
      n_tokens += shapes[i].second;
    }
    q.resize(n_tokens * kHeads * head_dim);
    for (auto& x : q) x = noise(rng);
  }

  // Dense causal attention for every new token, straight from the formula.
  std::vector<float> dense(float scale, int64_t window) const {
    std::vector<float> out(q.size());
    const int64_t group = kHeads / kKvHeads;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto& s = seqs[i];
      for (int64_t j = 0; j < s.n_query; ++j) {
        const int64_t t = s.query_start + j, pos = s.start_pos + j;
        for (int64_t h = 0; h < kHeads; ++h) {
          std::vector<float> w;
          std::vector<int64_t> keys;
          for (int64_t p = 0; p <= pos; ++p) {
            if (window > 0 && p <= pos - window) continue;
            double d = 0;
            for (int64_t e = 0; e < head_dim; ++e) {
              d += q[(t * kHeads + h) * head_dim + e] *
                   dense_k[i][(p * kKvHeads + h / group) * head_dim + e];
            }
            w.push_back(static_cast<float>(d) * scale);
            keys.push_back(p);
          }
          softmax(w.data(), static_cast<int64_t>(w.size()));
          for (int64_t e = 0; e < head_dim; ++e) {
            double acc = 0;
            for (size_t k = 0; k < keys.size(); ++k) {
              acc += w[k] * dense_v[i][(keys[k] * kKvHeads + h / group) * head_dim + e];
            }
            out[(t * kHeads + h) * head_dim + e] = static_cast<float>(acc);
          }
        }
      }
    }
    return out;
  }
};

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

TEST(PagedAttention, ReferenceMatchesDenseAttention) {
  Fixture f;
  for (int64_t window : {0, 5}) {
    AttentionParams p{kHeads, 1.0f / std::sqrt(static_cast<float>(f.head_dim)), window};
    std::vector<float> out(f.q.size());
    ASSERT_TRUE(paged_attention_ref(f.q.data(), f.cache, f.seqs, p, out.data()).ok());
    expect_close(out, f.dense(p.scale, window), 1e-5f);
  }
}

TEST(PagedAttention, FastMatchesReferenceOnAnyThreadCount) {
  Fixture f;
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int64_t window : {0, 3, 8}) {
      AttentionParams p{kHeads, 0.3f, window};
      std::vector<float> ref(f.q.size()), fast(f.q.size());
      ASSERT_TRUE(paged_attention_ref(f.q.data(), f.cache, f.seqs, p, ref.data()).ok());
      ASSERT_TRUE(paged_attention(f.q.data(), f.cache, f.seqs, p, fast.data(), pool).ok());
      expect_close(fast, ref, 1e-5f);
    }
  }
}

// Few sequences, long contexts, many threads: each tile's keys are split over threads and
// the parts' softmax statistics merged (flash-decoding).
TEST(PagedAttention, KeySplitAcrossThreadsMatchesReference) {
  Fixture f({{200, 1}, {150, 2}});
  for (int threads : {4, 16}) {
    ThreadPool pool(threads);
    for (int64_t window : {0, 150}) {
      AttentionParams p{kHeads, 0.3f, window};
      std::vector<float> ref(f.q.size()), fast(f.q.size());
      ASSERT_TRUE(paged_attention_ref(f.q.data(), f.cache, f.seqs, p, ref.data()).ok());
      ASSERT_TRUE(paged_attention(f.q.data(), f.cache, f.seqs, p, fast.data(), pool).ok());
      expect_close(fast, ref, 1e-5f);
      expect_close(fast, f.dense(p.scale, window), 1e-5f);
    }
  }
}

// Head dims that are multiples of 16 run the sixteen-key AVX-512 score and weighted-sum
// kernels (when the CPU has AVX-512): every pass width of the weighted sum (64-wide passes and
// a 16, 32 or 48 remainder), blocks shorter and longer than 16 keys, prefill tiles with causal
// ranges inside a group of keys, a sliding window, and keys split over threads.
TEST(PagedAttention, SixteenKeyKernelsMatchReference) {
  for (auto [block, dim] :
       {std::pair<int64_t, int64_t>{16, 64}, {16, 16}, {8, 48}, {32, 96}, {16, 128}, {4, 32}}) {
    SCOPED_TRACE("block " + std::to_string(block) + ", head_dim " + std::to_string(dim));
    Fixture f({{0, 21}, {40, 1}, {9, 7}, {0, 1}, {150, 2}}, block, dim);
    for (int threads : {1, 3, 16}) {
      ThreadPool pool(threads);
      for (int64_t window : {0, 5, 70}) {
        AttentionParams p{kHeads, 1.0f / std::sqrt(static_cast<float>(dim)), window};
        std::vector<float> ref(f.q.size()), fast(f.q.size());
        ASSERT_TRUE(paged_attention_ref(f.q.data(), f.cache, f.seqs, p, ref.data()).ok());
        ASSERT_TRUE(paged_attention(f.q.data(), f.cache, f.seqs, p, fast.data(), pool).ok());
        expect_close(fast, ref, 1e-5f);
      }
    }
  }
}

TEST(PagedAttention, KvWriteFillsTheSlotsOfTheNewTokens) {
  Fixture f;
  const int64_t row = kKvHeads * f.head_dim;
  std::vector<float> k(f.n_tokens * row), v(f.n_tokens * row);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i);
    v[i] = -static_cast<float>(i);
  }
  paged_kv_write(f.cache, f.seqs, k.data(), v.data());
  const AttentionSeq& s = f.seqs[2];  // 9 cached, 7 new: positions 9..15 of its first block
  for (int64_t j = 0; j < s.n_query; ++j) {
    const int64_t pos = s.start_pos + j;
    const int64_t slot = s.block_table[pos / f.block] * f.block + pos % f.block;
    EXPECT_EQ(f.k_cache[slot * row + 3], k[(s.query_start + j) * row + 3]);
    EXPECT_EQ(f.v_cache[slot * row + 5], v[(s.query_start + j) * row + 5]);
  }
}

TEST(PagedAttention, BadBatchesAreErrors) {
  Fixture f;
  ThreadPool pool(1);
  std::vector<float> out(f.q.size());
  AttentionParams p{kHeads, 1.0f, 0};

  auto short_table = f.seqs;
  short_table[0].block_table = short_table[0].block_table.subspan(0, 1);  // 21 tokens need 2
  Status s = paged_attention(f.q.data(), f.cache, short_table, p, out.data(), pool);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot hold 21 tokens"), std::string::npos) << s.message();

  std::vector<int32_t> bad_ids = {3, kBlocks};
  auto bad_block = f.seqs;
  bad_block[0].block_table = bad_ids;
  s = paged_attention(f.q.data(), f.cache, bad_block, p, out.data(), pool);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the cache"), std::string::npos) << s.message();

  AttentionParams bad_heads{5, 1.0f, 0};
  EXPECT_FALSE(paged_attention(f.q.data(), f.cache, f.seqs, bad_heads, out.data(), pool).ok());

  PagedKvLayer int8 = f.cache;
  int8.dtype = DType::kI8;
  s = paged_attention(f.q.data(), int8, f.seqs, p, out.data(), pool);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);

  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    PagedKvLayer bad_scale = f.cache;
    bad_scale.v_scale = bad;
    s = paged_attention(f.q.data(), bad_scale, f.seqs, p, out.data(), pool);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("scales must be positive"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace qs::ops
