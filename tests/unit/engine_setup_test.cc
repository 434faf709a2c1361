// tests: the engine set-up every front end shares (the CLI commands, `serve`, the Python LLM):
// a checkpoint's merged EOS ids (engine/eos_ids.h) and serve's KV-cache sizing
// (engine::serving_kv_cache_bytes), each figure worked out here by hand.
#include <gtest/gtest.h>

#include "engine/eos_ids.h"
#include "engine/memory_budget.h"
#include "tokenizer/tokenizer.h"

namespace qs::engine {
namespace {

const std::string kStoriesDir = std::string(QS_SOURCE_DIR) + "/models/stories260K";

models::ModelConfig small_config() {
  models::ModelConfig c;
  c.n_layers = 2;
  c.n_kv_heads = 3;
  c.head_dim = 4;  // K and V: 2 x 2 layers x 3 heads x 4 x 4 bytes (f32) = 192 bytes a token
  return c;
}

TEST(MergedEosIds, UnionOfConfigGenerationConfigAndTokenizerSortedOnce) {
  auto tokenizer = tok::load_tokenizer(kStoriesDir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  ASSERT_EQ((*tokenizer)->eos_id(), 2);  // stories260K's </s>
  models::ModelConfig config;
  config.eos_token_ids = {7, 2};
  io::GenerationConfig gen;
  gen.eos_token_ids = {9, 7};  // a chat model's end-of-turn beside config.json's
  EXPECT_EQ(merged_eos_ids(config, gen, **tokenizer), (std::vector<int32_t>{2, 7, 9}));
  // Nothing declared but the tokenizer's: that one alone.
  EXPECT_EQ(merged_eos_ids(models::ModelConfig{}, io::GenerationConfig{}, **tokenizer),
            (std::vector<int32_t>{2}));
}

TEST(ServingKvCacheBytes, ExplicitBytesWinAndMustBePositive) {
  ServingKvCacheSize size;
  size.bytes = 12345;
  size.memory_fraction = 0.5;  // ignored when bytes are given (serve's --kv-cache-memory wins)
  size.max_model_len = 64;
  size.max_num_seqs = 2;
  auto bytes = serving_kv_cache_bytes(small_config(), size);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_EQ(*bytes, 12345);
  size.bytes = 0;
  auto zero = serving_kv_cache_bytes(small_config(), size);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
}

TEST(ServingKvCacheBytes, FractionOfAvailableMemory) {
  ServingKvCacheSize size;
  size.memory_fraction = 1.5;
  EXPECT_FALSE(serving_kv_cache_bytes(small_config(), size).ok());
  size.memory_fraction = 0.25;
  auto bytes = serving_kv_cache_bytes(small_config(), size);
  auto avail = available_memory_bytes();
  ASSERT_TRUE(bytes.ok() && avail.ok());
  EXPECT_GT(*bytes, 0);
  EXPECT_LT(*bytes, *avail);  // a quarter; MemAvailable moves between reads, never by 4x
}

TEST(ServingKvCacheBytes, DefaultIsEverySequenceAtFullLengthPlusABlock) {
  ServingKvCacheSize size;
  size.max_model_len = 100;
  size.max_num_seqs = 3;
  size.block_size = 16;
  auto bytes = serving_kv_cache_bytes(small_config(), size);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_EQ(*bytes, 192 * (100 + 16) * 3);
  // bf16 halves a token's bytes.
  size.cache_dtype = DType::kBF16;
  EXPECT_EQ(*serving_kv_cache_bytes(small_config(), size), 96 * (100 + 16) * 3);
}

TEST(ServingKvCacheBytes, CappedAtAQuarterOfMemoryButNeverBelowOneSequence) {
  auto avail = available_memory_bytes();
  ASSERT_TRUE(avail.ok());
  ServingKvCacheSize size;
  size.max_model_len = 100;
  size.block_size = 16;
  // More sequences than a quarter of memory holds: the cap, which is above one sequence.
  size.max_num_seqs = *avail / (192 * 116) + 1;
  auto capped = serving_kv_cache_bytes(small_config(), size);
  ASSERT_TRUE(capped.ok());
  EXPECT_LE(*capped, *avail / 4 * 2);  // MemAvailable moves between reads, not by 2x
  EXPECT_GE(*capped, *avail / 4 / 2);
  // One sequence longer than a quarter of memory: still one whole sequence.
  size.max_num_seqs = 1;
  size.max_model_len = *avail / 192;
  auto one = serving_kv_cache_bytes(small_config(), size);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, 192 * (size.max_model_len + 16));
}

}  // namespace
}  // namespace qs::engine
