// Unit tests for the make-model presets: each preset parses, and the parameter count its tensor
// list implies equals the count the model's publishers state (HF model cards / safetensors
// metadata), which checks the presets' shapes and our tensor lists against outside numbers.
#include "models/model_presets.h"

#include <gtest/gtest.h>

#include "models/model_config.h"
#include "models/tower_tensors.h"

namespace qs::models {
namespace {

int64_t parameter_count(const std::string& preset) {
  auto json = model_preset(preset);
  EXPECT_TRUE(json.ok()) << json.status().to_string();
  auto config = parse_model_config(*json);
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  int64_t n = 0;
  for (const auto& spec : expected_tensors(*config)) {
    int64_t e = 1;
    for (int64_t d : spec.shape) e *= d;
    n += e;
  }
  return n;
}

TEST(ModelPresets, ParameterCountsMatchPublishedOnes) {
  EXPECT_EQ(parameter_count("qwen2.5-0.5b"), 494032768);     // Qwen2.5-0.5B: 0.49B
  EXPECT_EQ(parameter_count("qwen2.5-1.5b"), 1543714304);    // Qwen2.5-1.5B: 1.54B
  EXPECT_EQ(parameter_count("tinyllama-1.1b"), 1100048384);  // TinyLlama-1.1B
  EXPECT_EQ(parameter_count("llama-3.2-1b"), 1235814400);    // Llama-3.2-1B: 1.24B
  EXPECT_EQ(parameter_count("qwen3-0.6b"), 596049920);       // Qwen3-0.6B: 0.6B
  // Mixture-of-Experts: every expert counted (the safetensors totals of the hub checkpoints).
  EXPECT_EQ(parameter_count("qwen3-30b-a3b"), 30532122624);      // Qwen3-30B-A3B: 30.5B
  EXPECT_EQ(parameter_count("qwen1.5-moe-a2.7b"), 14315784192);  // Qwen1.5-MoE-A2.7B: 14.3B
  EXPECT_EQ(parameter_count("mixtral-8x7b"), 46702792704);       // Mixtral-8x7B: 46.7B
}

// The active parameters the model cards state: Qwen3-30B-A3B "3.3B activated", Qwen1.5-MoE
// "2.7B activated", Mixtral-8x7B "12.9B active"; a dense model's equal its total.
TEST(ModelPresets, ActiveParametersMatchPublishedOnes) {
  auto active = [](const std::string& preset) {
    auto config = parse_model_config(*model_preset(preset));
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    EXPECT_EQ(models::parameter_count(*config), parameter_count(preset));
    return models::active_parameter_count(*config);
  };
  EXPECT_EQ(active("qwen3-30b-a3b"), 3353032704);      // 3.35B
  EXPECT_EQ(active("qwen1.5-moe-a2.7b"), 2689173504);  // 2.69B
  EXPECT_EQ(active("mixtral-8x7b"), 12879925248);      // 12.9B
  EXPECT_EQ(active("qwen2.5-0.5b"), 494032768);
}

// A multimodal preset: the decoder's tensors and its towers' (vision, audio), apart.
std::pair<int64_t, int64_t> decoder_and_tower_parameters(const std::string& preset) {
  auto json = model_preset(preset);
  EXPECT_TRUE(json.ok()) << json.status().to_string();
  auto config = parse_model_config(*json);
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  auto towers = tower_tensors(*json, *config);
  EXPECT_TRUE(towers.ok()) << towers.status().to_string();
  int64_t n = 0;
  for (const auto& spec : *towers) {
    int64_t e = 1;
    for (int64_t d : spec.shape) e *= d;
    n += e;
  }
  return {parameter_count(*config), n};
}

// transformers 5.23 builds these models from the presets' configs with exactly these counts
// (scripts/golden/count_omni_parameters.py); the hub cards say Qwen2.5-VL-3B-Instruct 3.75B,
// Qwen2.5-Omni-7B 10.7B with its talker and token2wav (the thinker alone: 8.93B).
TEST(ModelPresets, MultimodalParameterCountsMatchTransformers) {
  const auto [vl_decoder, vl_towers] = decoder_and_tower_parameters("qwen2.5-vl-3b");
  EXPECT_EQ(vl_decoder, 3085938688);  // Qwen2.5-3B's, tied embedding
  EXPECT_EQ(vl_towers, 668684288);
  EXPECT_EQ(vl_decoder + vl_towers, 3754622976);
  const auto [omni_decoder, omni_towers] = decoder_and_tower_parameters("qwen2.5-omni-7b");
  EXPECT_EQ(omni_decoder, 7615616512);  // Qwen2.5-7B's, untied
  EXPECT_EQ(omni_towers, 676550144 + 639647232);
}

TEST(ModelPresets, MultimodalPresetsCarryTheirProcessor) {
  auto vl = model_preset_preprocessor("qwen2.5-vl-3b");
  ASSERT_TRUE(vl.ok());
  EXPECT_EQ((*vl)["max_pixels"], 12845056);
  EXPECT_EQ((*vl)["min_pixels"], 3136);
  auto omni = model_preset_preprocessor("qwen2.5-omni-7b");
  ASSERT_TRUE(omni.ok());
  EXPECT_EQ((*omni)["feature_size"], 128);
  auto text = model_preset_preprocessor("qwen2.5-0.5b");
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(text->is_null());
  EXPECT_FALSE(model_preset_preprocessor("gpt-5").ok());
}

TEST(ModelPresets, TowerFieldsOutOfRangeAreErrors) {
  auto bad = vision_tower_tensors({{"depth", 0}}, VisionQkv::kFused);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("depth"), std::string::npos);
  auto wrong_type = audio_tower_tensors({{"d_model", "wide"}});
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("d_model"), std::string::npos);
  EXPECT_FALSE(audio_tower_tensors(nlohmann::json::array()).ok());
}

TEST(ModelPresets, EveryPresetParses) {
  for (const auto& name : model_preset_names()) {
    auto json = model_preset(name);
    ASSERT_TRUE(json.ok()) << name;
    auto config = parse_model_config(*json);
    EXPECT_TRUE(config.ok()) << name << ": " << config.status().to_string();
  }
}

TEST(ModelPresets, UnknownNameListsTheKnownOnes) {
  auto json = model_preset("gpt-5");
  ASSERT_FALSE(json.ok());
  EXPECT_NE(json.status().message().find("qwen2.5-0.5b"), std::string::npos);
}

}  // namespace
}  // namespace qs::models
