// tests: config.json parsing per family, RoPE frequencies (llama3 scaling against values
// worked out from transformers' _compute_llama3_parameters) and the declarative tensor list.
#include <algorithm>

#include <gtest/gtest.h>

#include "model_random_checkpoint.h"
#include "models/model_config.h"

namespace qs::models {
namespace {

using nlohmann::json;
using qs::testing::tiny_config;

bool has_tensor(const std::vector<TensorSpec>& specs, const std::string& name,
                std::vector<int64_t> shape) {
  return std::any_of(specs.begin(), specs.end(),
                     [&](const TensorSpec& s) { return s.name == name && s.shape == shape; });
}

TEST(ModelConfig, LlamaDefaultsAndTensorList) {
  json c = tiny_config("LlamaForCausalLM");
  c["eos_token_id"] = {2, 7};
  c["bos_token_id"] = 1;
  auto r = parse_model_config(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->family, Family::kLlama);
  EXPECT_EQ(r->head_dim, 8);
  EXPECT_EQ(r->n_kv_heads, 2);
  EXPECT_FALSE(r->qkv_bias);
  EXPECT_FALSE(r->qk_norm);
  EXPECT_EQ(r->bos_token_id, 1);
  EXPECT_EQ(r->eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(r->sliding_window, (std::vector<int64_t>{0, 0}));
  const auto specs = expected_tensors(*r);
  // embed + 2 x (2 norms + 4 attn + 3 mlp) + norm + lm_head
  EXPECT_EQ(specs.size(), 1u + 2u * 9u + 2u);
  EXPECT_TRUE(has_tensor(specs, "model.layers.1.self_attn.k_proj.weight", {16, 32}));
  EXPECT_TRUE(has_tensor(specs, "model.layers.0.self_attn.o_proj.weight", {32, 32}));
  EXPECT_TRUE(has_tensor(specs, "model.layers.0.mlp.down_proj.weight", {32, 48}));
  EXPECT_TRUE(has_tensor(specs, "lm_head.weight", {97, 32}));
}

TEST(ModelConfig, LlamaAttentionBiasCoversQkvAndO) {
  json c = tiny_config("LlamaForCausalLM");
  c["attention_bias"] = true;
  auto r = parse_model_config(c);
  ASSERT_TRUE(r.ok());
  const auto specs = expected_tensors(*r);
  EXPECT_TRUE(has_tensor(specs, "model.layers.0.self_attn.q_proj.bias", {32}));
  EXPECT_TRUE(has_tensor(specs, "model.layers.0.self_attn.o_proj.bias", {32}));
}

TEST(ModelConfig, Qwen2HasQkvBiasOnly) {
  json c = tiny_config("Qwen2ForCausalLM");
  c["tie_word_embeddings"] = true;
  auto r = parse_model_config(c);
  ASSERT_TRUE(r.ok());
  const auto specs = expected_tensors(*r);
  EXPECT_TRUE(has_tensor(specs, "model.layers.0.self_attn.v_proj.bias", {16}));
  EXPECT_FALSE(has_tensor(specs, "model.layers.0.self_attn.o_proj.bias", {32}));
  EXPECT_FALSE(has_tensor(specs, "lm_head.weight", {97, 32}));  // tied
}

// The hub's Qwen2.5-VL config keeps the decoder's fields at the top and spells M-RoPE in
// rope_scaling (transformers 5 nests them under text_config; vl_decoder_test.cc reads that).
TEST(ModelConfig, Qwen2_5_VlHubConfig) {
  json c = tiny_config("Qwen2_5_VLForConditionalGeneration");  // head_dim 8: 4 frequencies
  c["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {1, 1, 2}}};
  c["vision_config"] = {{"spatial_merge_size", 2}, {"tokens_per_second", 2}};
  c["image_token_id"] = 90;
  c["video_token_id"] = 91;
  auto r = parse_model_config(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->family, Family::kQwen2_5_VL);
  EXPECT_TRUE(r->qkv_bias);
  EXPECT_EQ(r->mrope_section, (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(r->image_token_id, 90);
  EXPECT_EQ(r->video_token_id, 91);
  EXPECT_EQ(r->tower_prefixes, (std::vector<std::string>{"visual."}));
  EXPECT_DOUBLE_EQ(r->vision_tokens_per_second, 2.0);
  // Sections that do not cover head_dim / 2, and a VL config without its tower's config.
  json bad = c;
  bad["rope_scaling"]["mrope_section"] = {1, 1, 1};
  EXPECT_FALSE(parse_model_config(bad).ok());
  bad = c;
  bad.erase("rope_scaling");
  EXPECT_FALSE(parse_model_config(bad).ok());
  bad = c;
  bad.erase("vision_config");
  EXPECT_FALSE(parse_model_config(bad).ok());
  bad = c;
  bad["text_config"] = "not an object";
  EXPECT_FALSE(parse_model_config(bad).ok());
}

TEST(ModelConfig, Qwen2SlidingWindowOnUpperLayers) {
  json c = tiny_config("Qwen2ForCausalLM");
  c["num_hidden_layers"] = 3;
  c["sliding_window"] = 64;
  c["max_window_layers"] = 1;
  auto off = parse_model_config(c);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->sliding_window, (std::vector<int64_t>{0, 0, 0}));  // use_sliding_window absent
  c["use_sliding_window"] = true;
  auto on = parse_model_config(c);
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(on->sliding_window, (std::vector<int64_t>{0, 64, 64}));
  c["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  auto typed = parse_model_config(c);
  ASSERT_TRUE(typed.ok());
  EXPECT_EQ(typed->sliding_window, (std::vector<int64_t>{64, 0, 64}));
  c["use_sliding_window"] = false;  // as transformers: then no layer has a window
  auto unused = parse_model_config(c);
  ASSERT_TRUE(unused.ok());
  EXPECT_EQ(unused->sliding_window, (std::vector<int64_t>{0, 0, 0}));
}

TEST(ModelConfig, Qwen3ExplicitHeadDimAndQkNorm) {
  json c = tiny_config("Qwen3ForCausalLM");
  c["head_dim"] = 16;  // != hidden / heads = 8
  auto r = parse_model_config(c);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->head_dim, 16);
  EXPECT_TRUE(r->qk_norm);
  const auto specs = expected_tensors(*r);
  EXPECT_TRUE(has_tensor(specs, "model.layers.0.self_attn.q_proj.weight", {64, 32}));
  EXPECT_TRUE(has_tensor(specs, "model.layers.0.self_attn.k_proj.weight", {32, 32}));
  EXPECT_TRUE(has_tensor(specs, "model.layers.0.self_attn.o_proj.weight", {32, 64}));
  EXPECT_TRUE(has_tensor(specs, "model.layers.1.self_attn.q_norm.weight", {16}));
  EXPECT_TRUE(has_tensor(specs, "model.layers.1.self_attn.k_norm.weight", {16}));
  EXPECT_FALSE(has_tensor(specs, "model.layers.0.self_attn.q_proj.bias", {64}));
}

TEST(ModelConfig, MistralSlidingWindowMayBeNull) {
  json c = tiny_config("MistralForCausalLM");
  c["sliding_window"] = nullptr;
  auto full = parse_model_config(c);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->sliding_window, (std::vector<int64_t>{0, 0}));
  c["sliding_window"] = 4;
  auto windowed = parse_model_config(c);
  ASSERT_TRUE(windowed.ok());
  EXPECT_EQ(windowed->sliding_window, (std::vector<int64_t>{4, 4}));
}

TEST(ModelConfig, UnknownArchitectureNamesItAndTheSupportedOnes) {
  auto r = parse_model_config(tiny_config("GPT2LMHeadModel"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("GPT2LMHeadModel"), std::string::npos) << m;
  for (const char* a :
       {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    EXPECT_NE(m.find(a), std::string::npos) << m;
  }
}

TEST(ModelConfig, BadFieldsAreNamed) {
  json c = tiny_config("LlamaForCausalLM");
  c.erase("hidden_size");
  auto missing = parse_model_config(c);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("hidden_size"), std::string::npos);

  c = tiny_config("LlamaForCausalLM");
  c["num_key_value_heads"] = 3;
  auto gqa = parse_model_config(c);
  ASSERT_FALSE(gqa.ok());
  EXPECT_NE(gqa.status().message().find("num_key_value_heads"), std::string::npos);

  c = tiny_config("LlamaForCausalLM");
  c["vocab_size"] = "many";
  auto type = parse_model_config(c);
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("vocab_size"), std::string::npos);

  c = tiny_config("LlamaForCausalLM");
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  auto yarn = parse_model_config(c);
  ASSERT_FALSE(yarn.ok());
  EXPECT_NE(yarn.status().message().find("yarn"), std::string::npos);
}

TEST(ModelConfig, DefaultRopeFrequencies) {
  json c = tiny_config("LlamaForCausalLM");  // head_dim 8, theta 1e4
  auto r = parse_model_config(c);
  ASSERT_TRUE(r.ok());
  const auto inv = rope_inv_freq(*r);
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_FLOAT_EQ(inv[1], 0.1f);  // 1e4^(-2/8)
  EXPECT_FLOAT_EQ(inv[2], 0.01f);
  EXPECT_FLOAT_EQ(inv[3], 0.001f);

  c["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  auto linear = parse_model_config(c);
  ASSERT_TRUE(linear.ok());
  EXPECT_FLOAT_EQ(rope_inv_freq(*linear)[1], 0.025f);
}

// Llama 3.1's rope: theta 5e5, head_dim 128, factor 8, low/high 1/4, original context 8192.
// Expected values worked out from the formula: wavelen = 2 pi / f; wavelen > 8192 -> f / 8;
// wavelen < 2048 -> f; else s = (8192 / wavelen - 1) / 3 and (1 - s) f / 8 + s f.
TEST(ModelConfig, Llama3RopeScalingMatchesTransformers) {
  json c = tiny_config("LlamaForCausalLM");
  c["hidden_size"] = 512;
  c["num_attention_heads"] = 4;
  c["num_key_value_heads"] = 4;
  c["rope_theta"] = 500000.0;
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  auto r = parse_model_config(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->head_dim, 128);
  const auto inv = rope_inv_freq(*r);
  ASSERT_EQ(inv.size(), 64u);
  const std::vector<std::pair<int, double>> expected = {
      {0, 1.0},                      // high frequency: kept
      {20, 0.016560440883040428},    // kept
      {28, 0.0032114461064338684},   // wavelen 1956 < 2048: kept
      {29, 0.0021665708627551794},   // smooth band
      {32, 0.000524846138432622},    // smooth band
      {34, 0.00017850780568551272},  // smooth band
      {35, 9.556212171446532e-05},   // wavelen 8219 > 8192: divided by 8
      {63, 3.068925877869333e-07},   // divided by 8
  };
  for (const auto& [i, want] : expected) {
    EXPECT_NEAR(inv[i], want, 1e-6 * want) << "index " << i;
  }
}

}  // namespace
}  // namespace qs::models
