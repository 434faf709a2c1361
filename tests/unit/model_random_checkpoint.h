// tests: writes small random-init Hugging Face checkpoints (config.json + model.safetensors)
// from a config.json object and the declarative tensor list, for the model tests. Norm weights
// are drawn near 1 and the rest near 0 so that activations stay in a realistic range.
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/json.h"
#include "io/checkpoint.h"
#include "models/model_config.h"

namespace qs::testing {

// Tiny shapes for `architecture`; the Mixture-of-Experts families also get 4 experts of 16
// columns, top-2 (and Qwen2-MoE a shared expert of 24).
inline nlohmann::json tiny_config(const std::string& architecture) {
  nlohmann::json c = {{"architectures", {architecture}},
                      {"vocab_size", 97},
                      {"hidden_size", 32},
                      {"intermediate_size", 48},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"max_position_embeddings", 256},
                      {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0},
                      {"tie_word_embeddings", false}};
  if (architecture == "Qwen2MoeForCausalLM" || architecture == "Qwen3MoeForCausalLM" ||
      architecture == "MixtralForCausalLM") {
    c.update({{"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 16}});
  }
  if (architecture == "Qwen2MoeForCausalLM") c["shared_expert_intermediate_size"] = 24;
  // The multimodal decoders: M-RoPE over head_dim 8 (four frequencies) and their towers'
  // configs (the towers' tensors are not the decoder's to check).
  if (architecture == "Qwen2_5_VLForConditionalGeneration" ||
      architecture == "Qwen2_5OmniThinkerForConditionalGeneration") {
    c["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {1, 1, 2}}};
    c["vision_config"] = {{"spatial_merge_size", 2}};
  }
  if (architecture == "Qwen2_5OmniThinkerForConditionalGeneration") {
    c["audio_config"] = nlohmann::json::object();
  }
  return c;
}

// A fresh empty directory under the test temp dir.
inline std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("qs_model_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// `skip` names a tensor to leave out; `reshape` replaces one tensor's shape.
struct CheckpointEdits {
  std::string skip;
  std::string reshape_name;
  std::vector<int64_t> reshape_to;
  std::vector<std::string> extra;  // additional [4] tensors nobody expects
  std::vector<std::pair<std::string, Tensor>> extra_tensors;  // added as given
};

inline void write_random_checkpoint(const std::string& dir, const nlohmann::json& config,
                                    DType dtype = DType::kF32, uint32_t seed = 1,
                                    const CheckpointEdits& edits = {}) {
  ASSERT_TRUE(write_json(dir + "/config.json", config).ok());
  auto parsed = models::parse_model_config(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto spec : models::expected_tensors(*parsed)) {
    if (spec.name == edits.skip) continue;
    if (spec.name == edits.reshape_name) spec.shape = edits.reshape_to;
    const bool is_norm = spec.name.find("norm") != std::string::npos;
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    std::vector<float> values(n);
    for (auto& v : values) v = is_norm ? 1.0f + 0.1f * noise(rng) : 0.2f * noise(rng);
    tensors.emplace_back(spec.name, Tensor::from_f32(dtype, spec.shape, values));
  }
  for (const auto& name : edits.extra) {
    tensors.emplace_back(name, Tensor::from_f32(DType::kF32, {4}, {1, 2, 3, 4}));
  }
  for (const auto& t : edits.extra_tensors) tensors.push_back(t);
  ASSERT_TRUE(io::write_safetensors(dir + "/model.safetensors", tensors).ok());
}

}  // namespace qs::testing
