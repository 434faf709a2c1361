// tests: Model::load against the declarative tensor list: good checkpoints of every family
// load, and broken ones (missing tensor, wrong shape, unknown architecture, bad token ids)
// give errors that name the file, the tensor and both shapes.
#include <gtest/gtest.h>

#include "core/json.h"
#include "engine/kv_cache.h"
#include "model_random_checkpoint.h"
#include "models/model.h"

namespace qs::models {
namespace {

using qs::testing::CheckpointEdits;
using qs::testing::fresh_dir;
using qs::testing::tiny_config;
using qs::testing::write_random_checkpoint;

TEST(ModelLoad, EveryFamilyLoads) {
  for (const std::string& arch : supported_architectures()) {
    const std::string dir = fresh_dir("load_" + arch);
    write_random_checkpoint(dir, tiny_config(arch), DType::kBF16);
    auto m = Model::load(dir);
    ASSERT_TRUE(m.ok()) << arch << ": " << m.status().to_string();
    EXPECT_EQ((*m)->config().architecture, arch);
  }
}

TEST(ModelLoad, MissingTensorIsNamed) {
  const std::string dir = fresh_dir("missing");
  CheckpointEdits edits;
  edits.skip = "model.layers.1.mlp.up_proj.weight";
  write_random_checkpoint(dir, tiny_config("LlamaForCausalLM"), DType::kF32, 1, edits);
  auto m = Model::load(dir);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_NE(msg.find("'model.layers.1.mlp.up_proj.weight' is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[48, 32]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
}

TEST(ModelLoad, WrongShapeNamesFileTensorAndShapes) {
  const std::string dir = fresh_dir("shape");
  CheckpointEdits edits;
  edits.reshape_name = "model.layers.0.self_attn.k_proj.weight";
  edits.reshape_to = {32, 32};
  write_random_checkpoint(dir, tiny_config("Qwen2ForCausalLM"), DType::kF32, 1, edits);
  auto m = Model::load(dir);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_NE(msg.find("model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has "
                     "shape [32, 32], expected [16, 32]"),
            std::string::npos)
      << msg;
}

TEST(ModelLoad, MissingQwen3NormsAreReported) {
  // A Qwen2 checkpoint relabelled Qwen3 lacks q_norm/k_norm (and has biases nobody wants).
  const std::string dir = fresh_dir("qwen3_norms");
  write_random_checkpoint(dir, tiny_config("Qwen2ForCausalLM"));
  auto config = tiny_config("Qwen3ForCausalLM");
  config["head_dim"] = 8;
  ASSERT_TRUE(write_json(dir + "/config.json", config).ok());
  auto m = Model::load(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("self_attn.q_norm.weight' is missing"), std::string::npos)
      << m.status().message();
}

TEST(ModelLoad, UnknownArchitectureNamesTheConfigFile) {
  const std::string dir = fresh_dir("arch");
  write_random_checkpoint(dir, tiny_config("LlamaForCausalLM"));
  auto config = tiny_config("FalconForCausalLM");
  ASSERT_TRUE(write_json(dir + "/config.json", config).ok());
  auto m = Model::load(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos);
  EXPECT_NE(m.status().message().find("FalconForCausalLM"), std::string::npos);
}

TEST(ModelLoad, ExtraTensorsOnlyWarn) {
  const std::string dir = fresh_dir("extra");
  CheckpointEdits edits;
  edits.extra = {"model.rotary_emb.inv_freq"};
  write_random_checkpoint(dir, tiny_config("LlamaForCausalLM"), DType::kF32, 1, edits);
  EXPECT_TRUE(Model::load(dir).ok());
}

TEST(ModelForward, RejectsBadInputWithoutCrashing) {
  const std::string dir = fresh_dir("bad_input");
  write_random_checkpoint(dir, tiny_config("LlamaForCausalLM"));
  auto m = Model::load(dir);
  ASSERT_TRUE(m.ok());
  const ModelConfig& c = (*m)->config();
  engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim, 32, 16});
  ASSERT_TRUE(cache.reserve(0, 300).ok());
  ThreadPool pool(2);
  std::vector<float> logits;

  ForwardBatch batch;
  batch.token_ids = {1, 200};  // 200 >= vocab 97
  batch.seqs = {{0, 2, 0, cache.block_table(0)}};
  Status s = (*m)->forward(batch, cache.layers(), pool, &logits);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token id 200"), std::string::npos) << s.message();

  batch.token_ids = {1, 2};
  batch.seqs = {{0, 2, 255, cache.block_table(0)}};  // positions 255, 256 >= 256
  s = (*m)->forward(batch, cache.layers(), pool, &logits);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();

  batch.seqs = {{0, 1, 0, cache.block_table(0)}};  // covers 1 of 2 tokens
  EXPECT_FALSE((*m)->forward(batch, cache.layers(), pool, &logits).ok());

  batch.seqs = {{0, 2, 0, cache.block_table(0)}};
  ASSERT_TRUE((*m)->forward(batch, cache.layers(), pool, &logits).ok());
  EXPECT_EQ(logits.size(), 97u);
}

}  // namespace
}  // namespace qs::models
