// Unit tests for the JSON side of a checkpoint directory: read_json's error positions,
// write_json round trips, and generation_config.json parsing (eos as int or list, nulls,
// type and range errors naming the file and field).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/json.h"
#include "io/checkpoint.h"
#include "io/generation_config.h"

namespace qs::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class CheckpointJson : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_json_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  Result<GenerationConfig> parse(const std::string& text) {
    EXPECT_TRUE(write_file(path("generation_config.json"), text).ok());
    return read_generation_config(dir_);
  }

  std::string dir_;
};

TEST_F(CheckpointJson, ReadJsonReportsLineAndColumn) {
  ASSERT_TRUE(write_file(path("a.json"), "{\n  \"a\": 1,\n  \"b\": [1, 2,, 3]\n}").ok());
  auto r = read_json(path("a.json"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message().find(path("a.json") + ":3:14: invalid JSON: syntax error"), 0u)
      << r.status().message();
  auto missing = read_json(path("missing.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.json"), std::string::npos);
}

TEST_F(CheckpointJson, WriteJsonRoundTrip) {
  const json value = {{"hidden_size", 64}, {"rms_norm_eps", 1e-5}, {"names", {"a", "b"}}};
  ASSERT_TRUE(write_json(path("b.json"), value).ok());
  auto r = read_json(path("b.json"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, value);
}

TEST_F(CheckpointJson, GenerationConfigMissingFileIsEmpty) {
  auto c = read_generation_config(dir_);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_FALSE(c->temperature.has_value());
}

TEST_F(CheckpointJson, GenerationConfigFields) {
  // As Llama-3.1-Instruct ships it: eos is a list, sampling defaults set.
  auto c = parse(R"({"bos_token_id": 128000, "do_sample": true,
      "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9,
      "pad_token_id": null, "transformers_version": "4.42.3"})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->do_sample, true);
  EXPECT_DOUBLE_EQ(*c->temperature, 0.6);
  EXPECT_DOUBLE_EQ(*c->top_p, 0.9);
  EXPECT_FALSE(c->pad_token_id.has_value());
  EXPECT_FALSE(c->top_k.has_value());

  c = parse(R"({"bos_token_id": 1, "eos_token_id": 2, "top_k": 20, "max_new_tokens": 7})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c->top_k, 20);
  EXPECT_EQ(c->max_new_tokens, 7);
  EXPECT_EQ(generation_config_to_json(*c),
            json({{"bos_token_id", 1}, {"eos_token_id", 2}, {"top_k", 20}, {"max_new_tokens", 7}}));
}

TEST_F(CheckpointJson, GenerationConfigErrors) {
  const std::string file = path("generation_config.json");
  struct Case {
    const char* text;
    std::string expect;
  };
  const Case cases[] = {
      {R"({"eos_token_id": "2"})", ": 'eos_token_id' must be an integer or a list of integers"},
      {R"({"eos_token_id": [2, "x"]})", ": 'eos_token_id' must be an integer or a list"},
      {R"({"temperature": "hot"})", ": 'temperature' must be a number, found \"hot\""},
      {R"({"temperature": -1})", ": 'temperature' must be >= 0"},
      {R"({"top_p": 1.5})", ": 'top_p' must be in (0, 1]"},
      {R"({"top_k": 2.5})", ": 'top_k' must be an integer"},
      {R"({"do_sample": 1})", ": 'do_sample' must be true or false"},
      {R"([1, 2])", ": expected a JSON object, found array"},
  };
  for (const auto& c : cases) {
    auto r = parse(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().message().find(file + ": "), 0u) << "error must start with the file";
    EXPECT_NE(r.status().message().find(file + c.expect), std::string::npos)
        << c.text << " -> " << r.status().message();
  }
}

}  // namespace
}  // namespace qs::io
