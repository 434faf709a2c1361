// tests: the KV-cache scales a checkpoint carries (models/kv_scales.h): vLLM's names and
// fallbacks (self_attn.k_scale/v_scale, then k_proj/v_proj.output_scale, then kv_scale for
// both; one of the pair present stands for both), 1.0 where there is none, per-head scales
// reduced to their max, and bad scales rejected with the tensor's name.
#include <gtest/gtest.h>

#include "../common/engine_runner.h"
#include "model_random_checkpoint.h"
#include "models/model.h"

namespace qs::models {
namespace {

using testing::CheckpointEdits;

Tensor scalar(float v) {
  return Tensor::from_f32(DType::kF32, {}, {v});
}

Result<std::unique_ptr<Model>> load_with(const std::string& name,
                                         std::vector<std::pair<std::string, Tensor>> extra) {
  const std::string dir = testing::fresh_dir(name);
  CheckpointEdits edits;
  edits.extra_tensors = std::move(extra);
  testing::write_random_checkpoint(dir, testing::tiny_config("LlamaForCausalLM"), DType::kF32, 1,
                                   edits);
  return Model::load(dir);
}

TEST(KvCacheScales, MissingScalesAreOne) {
  auto m = load_with("kv_none", {});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const KvCacheScales& s = (*m)->kv_cache_scales();
  EXPECT_EQ(s.k, std::vector<float>({1.0f, 1.0f}));
  EXPECT_EQ(s.v, std::vector<float>({1.0f, 1.0f}));
  EXPECT_EQ(s.n_from_checkpoint, 0);
}

TEST(KvCacheScales, VllmNamesAndFallbacks) {
  auto m =
      load_with("kv_names",
                {// layer 0: vLLM's own names; an output_scale beside them is not used
                 {"model.layers.0.self_attn.k_scale", scalar(0.5f)},
                 {"model.layers.0.self_attn.v_scale", Tensor::from_f32(DType::kBF16, {1}, {0.25f})},
                 // layer 1: compressed-tensors' k_proj output scale, per kv head (max taken), and
                 // the legacy kv_scale, which only counts when neither of the pair is present
                 {"model.layers.1.self_attn.k_proj.output_scale",
                  Tensor::from_f32(DType::kF32, {2, 1, 1}, {0.125f, 0.375f})},
                 {"model.layers.1.self_attn.kv_scale", scalar(9.0f)}});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const KvCacheScales& s = (*m)->kv_cache_scales();
  EXPECT_EQ(s.k, std::vector<float>({0.5f, 0.375f}));
  EXPECT_EQ(s.v, std::vector<float>({0.25f, 0.375f}));  // layer 1: k's scale stands for v
  EXPECT_EQ(s.n_from_checkpoint, 2);

  auto legacy = load_with("kv_legacy", {{"model.layers.1.self_attn.kv_scale", scalar(2.0f)}});
  ASSERT_TRUE(legacy.ok()) << legacy.status().to_string();
  EXPECT_EQ((*legacy)->kv_cache_scales().k, std::vector<float>({1.0f, 2.0f}));
  EXPECT_EQ((*legacy)->kv_cache_scales().v, std::vector<float>({1.0f, 2.0f}));
}

TEST(KvCacheScales, BadScalesAreErrorsNamingTheTensor) {
  const std::pair<const char*, Tensor> cases[] = {
      {"model.layers.0.self_attn.k_scale", scalar(0.0f)},
      {"model.layers.0.self_attn.v_scale", scalar(-1.0f)},
      {"model.layers.1.self_attn.k_scale", scalar(INFINITY)},
      {"model.layers.1.self_attn.k_scale", Tensor::from_f32(DType::kF32, {3}, {1, 1, 1})},
  };
  int i = 0;
  for (const auto& [name, t] : cases) {
    auto m = load_with("kv_bad" + std::to_string(i++), {{name, t}});
    ASSERT_FALSE(m.ok()) << name;
    EXPECT_NE(m.status().message().find(name), std::string::npos) << m.status().message();
  }
}

// The logprob of the first greedy token of a fixed prompt, with a cache of `dtype`.
float first_logprob(const Model& model, DType dtype) {
  ThreadPool pool(1);
  engine::EngineConfig config;
  config.kv_cache_dtype = dtype;
  config.max_model_len = 32;
  config.kv_cache_bytes = engine::kv_cache_bytes_per_token(model.config(), dtype) * 64;
  auto e = engine::Engine::create(model, nullptr, {}, pool, config);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  engine::EngineRequest r;
  r.id = "r";
  r.prompt_ids = {5, 17, 3, 40, 41, 8, 9, 60};
  r.params.temperature = 0.0f;
  r.params.max_tokens = 1;
  r.params.logprobs = 0;
  EXPECT_TRUE((*e)->add_request(r).ok());
  auto done = testing::run_to_completion(**e);
  EXPECT_EQ(done["r"].logprobs.size(), 1u);
  return done["r"].logprobs.empty() ? 0.0f : done["r"].logprobs[0].sampled.logprob;
}

// The engine's fp8 cache divides by the checkpoint's scales; an auto (or bf16) cache ignores
// them, as vLLM forces them to 1.0 there. Scales of 1e-4 saturate every key and value at
// +-448 x 1e-4, which must change the output; with no scales the fp8 result stays near f32's.
TEST(KvCacheScales, EngineAppliesThemToFp8CachesOnly) {
  auto plain = load_with("kv_engine_plain", {});
  auto scaled =
      load_with("kv_engine_scaled", {{"model.layers.0.self_attn.k_scale", scalar(1e-4f)},
                                     {"model.layers.0.self_attn.v_scale", scalar(1e-4f)},
                                     {"model.layers.1.self_attn.k_scale", scalar(1e-4f)},
                                     {"model.layers.1.self_attn.v_scale", scalar(1e-4f)}});
  ASSERT_TRUE(plain.ok() && scaled.ok());
  const float ref = first_logprob(**plain, DType::kF32);
  EXPECT_EQ(first_logprob(**scaled, DType::kF32), ref);
  EXPECT_NEAR(first_logprob(**scaled, DType::kBF16), ref, 1e-2);
  EXPECT_NEAR(first_logprob(**plain, DType::kF8E4M3), ref, 5e-2);
  EXPECT_GT(std::fabs(first_logprob(**scaled, DType::kF8E4M3) - ref), 1e-3);
}

}  // namespace
}  // namespace qs::models
