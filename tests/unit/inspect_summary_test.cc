// Unit tests for the checkpoint summary behind `quantserve inspect`: counts, bytes and dtypes
// of a sharded mixed-dtype checkpoint built in a temp dir, the hyper-parameters echoed from
// config.json, the errors for a missing or broken config.json, and the built binary's text
// and --json output on the same directory.
#include "core/json.h"
#include "io/checkpoint_summary.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "../common/cli.h"
#include "io/checkpoint.h"

namespace qs::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class InspectSummary : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_inspect_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Two shards: BF16 [4, 6] + F32 [6] in the first, I32 [3, 2] + BF16 [2, 5] in the second.
    std::vector<std::pair<std::string, Tensor>> s1, s2;
    s1.emplace_back("model.embed_tokens.weight", Tensor::zeros(DType::kBF16, {4, 6}));
    s1.emplace_back("model.norm.weight", Tensor::zeros(DType::kF32, {6}));
    s2.emplace_back("model.layers.0.mlp.qweight", Tensor::zeros(DType::kI32, {3, 2}));
    s2.emplace_back("lm_head.weight", Tensor::zeros(DType::kBF16, {2, 5}));
    ASSERT_TRUE(write_safetensors(path("model-00001-of-00002.safetensors"), s1).ok());
    ASSERT_TRUE(write_safetensors(path("model-00002-of-00002.safetensors"), s2).ok());
    json weight_map;
    for (const auto& [name, t] : s1) weight_map[name] = "model-00001-of-00002.safetensors";
    for (const auto& [name, t] : s2) weight_map[name] = "model-00002-of-00002.safetensors";
    ASSERT_TRUE(
        write_json(path("model.safetensors.index.json"), {{"weight_map", weight_map}}).ok());
    ASSERT_TRUE(write_json(path("config.json"), {{"architectures", {"Qwen2ForCausalLM"}},
                                                 {"model_type", "qwen2"},
                                                 {"vocab_size", 2},
                                                 {"hidden_size", 6},
                                                 {"rope_scaling", nullptr},
                                                 {"eos_token_id", {5, 7}},
                                                 {"unlisted_key", 1}})
                    .ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Runs the built quantserve binary; returns its exit status and stdout.
  std::pair<int, std::string> run_binary(const std::string& args) {
    const testing::CliResult r = testing::run_cli(args, /*stderr_too=*/false);
    return {r.exit_code, r.output};
  }

  std::string dir_;
};

TEST_F(InspectSummary, CountsBytesAndDtypes) {
  auto s = summarize_checkpoint(dir_);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(s->model_type, "qwen2");
  EXPECT_EQ(s->n_tensors, 4);
  EXPECT_EQ(s->n_parameters, 24 + 6 + 6 + 10);
  EXPECT_EQ(s->total_bytes, 48u + 24u + 24u + 20u);
  EXPECT_EQ(s->files, (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors"}));
  ASSERT_EQ(s->dtypes.size(), 3u);
  EXPECT_EQ(s->dtypes.at("BF16").n_tensors, 2);
  EXPECT_EQ(s->dtypes.at("BF16").n_elements, 34);
  EXPECT_EQ(s->dtypes.at("BF16").n_bytes, 68u);
  EXPECT_EQ(s->dtypes.at("F32").n_bytes, 24u);
  EXPECT_EQ(s->dtypes.at("I32").n_elements, 6);
  // Known keys only, in the fixed display order; null values are skipped.
  ASSERT_EQ(s->hyper_parameters.size(), 3u);
  EXPECT_EQ(s->hyper_parameters[0].first, "hidden_size");
  EXPECT_EQ(s->hyper_parameters[1].first, "vocab_size");
  EXPECT_EQ(s->hyper_parameters[2].first, "eos_token_id");
  EXPECT_EQ(s->hyper_parameters[2].second, json::array({5, 7}));

  const std::string text = summary_to_text(*s);
  EXPECT_NE(text.find("architecture:              Qwen2ForCausalLM (model_type qwen2)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tensors:                   4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dtype BF16:                2 tensors, 34 elements, 68 B (68 bytes)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("weight memory:             116 B (116 bytes)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("files:                     2\n"), std::string::npos) << text;

  const json j = summary_to_json(*s);
  EXPECT_EQ(j["tensors"], 4);
  EXPECT_EQ(j["parameters"], 46);
  EXPECT_EQ(j["weight_bytes"], 116);
  EXPECT_EQ(j["dtypes"]["I32"], json({{"tensors", 1}, {"elements", 6}, {"bytes", 24}}));
  EXPECT_EQ(j["hyper_parameters"]["hidden_size"], 6);
}

TEST_F(InspectSummary, ConfigErrors) {
  auto missing_dir = summarize_checkpoint(path("nope"));
  ASSERT_FALSE(missing_dir.ok());
  EXPECT_EQ(missing_dir.status().message(), path("nope") + ": not a directory");
  fs::remove(path("config.json"));
  auto no_config = summarize_checkpoint(dir_);
  ASSERT_FALSE(no_config.ok());
  EXPECT_EQ(no_config.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_config.status().message().find("no config.json"), std::string::npos);
  ASSERT_TRUE(write_file(path("config.json"), "{\"hidden_size\": }").ok());
  auto bad = summarize_checkpoint(dir_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path("config.json") + ":1:17: invalid JSON"),
            std::string::npos)
      << bad.status().message();
  // A checkpoint error (a shard gone) surfaces as-is.
  ASSERT_TRUE(write_json(path("config.json"), json::object()).ok());
  fs::remove(path("model-00002-of-00002.safetensors"));
  auto no_shard = summarize_checkpoint(dir_);
  ASSERT_FALSE(no_shard.ok());
  EXPECT_NE(no_shard.status().message().find("model-00002-of-00002.safetensors"),
            std::string::npos);
}

TEST_F(InspectSummary, BinaryPrintsTextAndJson) {
  auto [rc, out] = run_binary("inspect --json " + dir_);
  ASSERT_EQ(rc, 0) << out;
  const json j = json::parse(out);
  EXPECT_EQ(j["architecture"], "Qwen2ForCausalLM");
  EXPECT_EQ(j["dtypes"]["BF16"]["bytes"], 68);
  EXPECT_EQ(j["weight_bytes"], 116);

  std::tie(rc, out) = run_binary("inspect " + dir_);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(out.find("parameters:                46 (46)\n"), std::string::npos) << out;

  std::tie(rc, out) = run_binary("inspect " + path("nope"));
  EXPECT_EQ(rc, 1);
  std::tie(rc, out) = run_binary("inspect");
  EXPECT_EQ(rc, 2);
  std::tie(rc, out) = run_binary("inspect --bogus " + dir_);
  EXPECT_EQ(rc, 2);
}

}  // namespace
}  // namespace qs::io
