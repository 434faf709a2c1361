// unit: a model kept inside a larger checkpoint (models/model_root.h). A full Qwen2.5-Omni
// config.json (the hub's Qwen2_5OmniModel and transformers 5's
// Qwen2_5OmniForConditionalGeneration) parses as its thinker_config with tensor prefix
// "thinker." and the talker / token2wav listed as not run; other configs are untouched; a
// broken container config is an error naming what is missing. A quantization config rooted
// at "thinker." reads the producers' stored names (block_name_to_quantize "thinker.model.layers",
// extra_config "thinker.lm_head") and its own implied rules alike, and never takes a rule meant
// for the talker.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/quant_config.h"
#include "models/model_config.h"
#include "models/model_root.h"
#include "quant_config_test_util.h"

namespace qs {
namespace {

using nlohmann::json;

// The tiny thinker fixture's config, which is what a full checkpoint nests.
json thinker_config() {
  std::ifstream in(std::string(QS_SOURCE_DIR) +
                   "/tests/golden/fixtures/omni/qwen2_5_omni_thinker/config.json");
  return json::parse(in);
}

json full_config(const std::string& architecture) {
  return {{"architectures", {architecture}},
          {"model_type", "qwen2_5_omni"},
          {"enable_audio_output", true},
          {"thinker_config", thinker_config()},
          {"talker_config", {{"model_type", "qwen2_5_omni_talker"}}},
          {"token2wav_config", {{"model_type", "qwen2_5_omni_token2wav"}}}};
}

TEST(ModelConfigFullOmni, ParsesAsItsThinker) {
  for (const std::string arch : {"Qwen2_5OmniModel", "Qwen2_5OmniForConditionalGeneration"}) {
    SCOPED_TRACE(arch);
    auto r = models::parse_model_config(full_config(arch));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto thinker = models::parse_model_config(thinker_config());
    ASSERT_TRUE(thinker.ok());
    EXPECT_EQ(r->architecture, "Qwen2_5OmniThinkerForConditionalGeneration");
    EXPECT_EQ(r->family, models::Family::kQwen2_5_OmniThinker);
    EXPECT_EQ(r->container_architecture, arch);
    EXPECT_EQ(r->tensor_prefix, "thinker.");
    ASSERT_EQ(r->skipped_parts.size(), 2u);
    EXPECT_EQ(r->skipped_parts[0].name, "talker");
    EXPECT_EQ(r->skipped_parts[0].prefix, "talker.");
    EXPECT_EQ(r->skipped_parts[1].name, "token2wav");
    EXPECT_EQ(r->skipped_parts[1].n_tensors, 0);  // counted by Model::load
    // Everything else is the thinker's own parse.
    EXPECT_EQ(r->hidden_size, thinker->hidden_size);
    EXPECT_EQ(r->n_layers, thinker->n_layers);
    EXPECT_EQ(r->mrope_section, thinker->mrope_section);
    EXPECT_EQ(r->audio_token_id, thinker->audio_token_id);
    EXPECT_EQ(r->tower_prefixes, thinker->tower_prefixes);
    EXPECT_TRUE(thinker->tensor_prefix.empty());
    EXPECT_TRUE(thinker->skipped_parts.empty());
  }
}

TEST(ModelConfigFullOmni, ThinkerWithoutArchitecturesAndWithoutSpeechParts) {
  json c = full_config("Qwen2_5OmniForConditionalGeneration");
  c["thinker_config"].erase("architectures");
  c.erase("talker_config");
  c.erase("token2wav_config");
  c["enable_audio_output"] = false;
  auto r = models::parse_model_config(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->architecture, "Qwen2_5OmniThinkerForConditionalGeneration");
  EXPECT_TRUE(r->skipped_parts.empty());
  // model_type alone marks the container too.
  c.erase("architectures");
  r = models::parse_model_config(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tensor_prefix, "thinker.");
}

TEST(ModelConfigFullOmni, BrokenContainersAreErrors) {
  json c = full_config("Qwen2_5OmniModel");
  c.erase("thinker_config");
  auto r = models::parse_model_config(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("thinker_config"), std::string::npos);
  EXPECT_NE(r.status().message().find("Qwen2_5OmniModel"), std::string::npos);
  c["thinker_config"] = "thinker";
  EXPECT_FALSE(models::parse_model_config(c).ok());
  // A thinker_config naming another architecture is refused as that architecture.
  c = full_config("Qwen2_5OmniModel");
  c["thinker_config"]["architectures"] = {"Qwen9Thinker"};
  r = models::parse_model_config(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Qwen9Thinker"), std::string::npos);
}

TEST(ModelConfigFullOmni, OtherConfigsAreTheirOwnRoot) {
  const json vl = {{"architectures", {"Qwen2_5_VLForConditionalGeneration"}},
                   {"thinker_config", {{"hidden_size", 1}}}};
  auto root = models::find_model_root(vl);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->config, &vl);
  EXPECT_TRUE(root->tensor_prefix.empty());
  EXPECT_TRUE(root->skipped_parts.empty());
  // diffusers' component configs carry no architectures at all.
  const json vae = {{"_class_name", "AutoencoderKL"}};
  root = models::find_model_root(vae);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->config, &vae);
}

TEST(QuantConfigRooted, ReadsStoredNamesAndImpliedRules) {
  // auto-round's config for a full Omni: blocks and extra_config under "thinker.", plus an
  // extra_config key for the talker.
  const json qc = {
      {"quant_method", "auto-round"},
      {"packing_format", "auto_round:auto_gptq"},
      {"bits", 4},
      {"group_size", 32},
      {"sym", true},
      {"block_name_to_quantize", "thinker.model.language_model.layers,thinker.model.layers"},
      {"extra_config",
       {{"thinker.model.layers.1.mlp.down_proj", {{"bits", 8}}},
        {"thinker.lm_head", {{"bits", 16}, {"data_type", "float"}}},
        {"talker.model.layers.0.self_attn.q_proj", {{"bits", 2}}}}}};
  auto parsed = io::parse_quant_config(qc, "config.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  const io::QuantConfig thinker = parsed->rooted("thinker.");
  EXPECT_EQ(thinker.root(), "thinker.");
  EXPECT_NE(thinker.summary().find("thinker."), std::string::npos) << thinker.summary();
  const auto int4 = io::testing::scheme(formats::Layout::kGptq, 4, 32, true, true);
  EXPECT_TRUE(io::testing::same(thinker.scheme_for("model.layers.0.self_attn.q_proj"), int4));
  EXPECT_EQ(thinker.scheme_for("model.layers.1.mlp.down_proj").bits, 8);
  EXPECT_FALSE(thinker.scheme_for("lm_head").quantized());
  EXPECT_FALSE(thinker.scheme_for("visual.blocks.0.attn.q").quantized());
  EXPECT_FALSE(thinker.scheme_for("audio_tower.layers.0.fc1").quantized());
  // The talker's rule and blocks are not the thinker's: "thinker.model.layers.0..." is not
  // "talker.model.layers.0...".
  EXPECT_EQ(thinker.scheme_for("model.layers.0.self_attn.q_proj").bits, 4);
  // Unrooted, the same config quantizes nothing the thinker-only names reach.
  EXPECT_FALSE(parsed->scheme_for("model.layers.0.self_attn.q_proj").quantized());
  EXPECT_EQ(parsed->scheme_for("talker.model.layers.0.self_attn.q_proj").bits, 2);

  // GPTQ's implied lm_head rule speaks the model's own name: a rooted config still keeps a
  // thinker's lm_head dense when lm_head is false.
  const json gptq = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"sym", true}};
  auto g = io::parse_quant_config(gptq, "config.json");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const io::QuantConfig rooted = g->rooted("thinker.");
  EXPECT_FALSE(rooted.scheme_for("lm_head").quantized());
  EXPECT_TRUE(rooted.scheme_for("model.layers.0.mlp.up_proj").quantized());
}

}  // namespace
}  // namespace qs
