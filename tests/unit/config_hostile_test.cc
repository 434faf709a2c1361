// unit: regressions for numbers a config file can set (issue 9): floats converted to integers
// without a range check (quantization_config), sizes with no upper bound (a huge layer count
// made an allocation throw and kill the process), token ids narrowed to int32 without a word,
// and a negative max_window_layers that indexed before the first layer. Each error names the
// field and, where there is one, the limit.
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/json.h"
#include "io/checkpoint.h"
#include "io/generation_config.h"
#include "io/quant_config.h"
#include "model_random_checkpoint.h"
#include "models/model_config.h"
#include "tokenizer/bpe_tokenizer.h"

namespace qs {
namespace {

using nlohmann::json;

std::string model_error(const json& c) {
  auto r = models::parse_model_config(c);
  return r.ok() ? "parsed" : r.status().message();
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(HostileConfig, QuantConfigFloatOutsideInt64IsAnErrorNotUb) {
  for (const char* group : {"1e300", "-1e300", "9.3e18", "-9.3e18", "4.5"}) {
    SCOPED_TRACE(group);
    const json qc = json::parse(std::string(R"({"bits": 4, "quant_method": "auto-round",
        "group_size": )") + group +
                                "}");
    auto r = io::parse_quant_config(qc, "config.json");
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(has(r.status().message(), "group_size")) << r.status().message();
    EXPECT_TRUE(has(r.status().message(), "expected an integer")) << r.status().message();
  }
  const json ok = json::parse(R"({"bits": 4.0, "group_size": 128.0, "quant_method": "gptq"})");
  EXPECT_TRUE(io::parse_quant_config(ok, "config.json").ok());
}

TEST(HostileConfig, ModelSizesHaveUpperBounds) {
  const std::pair<const char*, const char*> cases[] = {
      {"num_hidden_layers", "above the limit of 1024"},
      {"vocab_size", "above the limit of 4194304"},
      {"hidden_size", "above the limit of 1048576"},
      {"intermediate_size", "above the limit of 1048576"},
      {"num_attention_heads", "above the limit of 4096"},
      {"num_key_value_heads", "above the limit of 4096"},
      {"head_dim", "above the limit of 4096"},
      {"max_position_embeddings", "above the limit of 1073741824"},
  };
  for (const auto& [field, limit] : cases) {
    SCOPED_TRACE(field);
    json c = testing::tiny_config("Qwen2ForCausalLM");
    c[field] = int64_t{1} << 40;  // before: sliding_window.assign(2^40) threw for layers
    const std::string e = model_error(c);
    EXPECT_TRUE(has(e, std::string("config field '") + field + "' is 1099511627776, " + limit))
        << e;
  }
  json c = testing::tiny_config("LlamaForCausalLM");
  c["num_hidden_layers"] = 18446744073709551615ull;  // wrapped to -1 before
  EXPECT_TRUE(has(model_error(c), "must be a 64-bit integer")) << model_error(c);
}

TEST(HostileConfig, TokenIdsAreNotNarrowed) {
  json c = testing::tiny_config("LlamaForCausalLM");
  c["bos_token_id"] = (int64_t{1} << 32) + 1;  // was read as 1
  EXPECT_TRUE(has(model_error(c), "'bos_token_id' is 4294967297, outside 0..2147483647"))
      << model_error(c);
  c = testing::tiny_config("LlamaForCausalLM");
  c["eos_token_id"] = {2, int64_t{1} << 40};
  EXPECT_TRUE(has(model_error(c), "'eos_token_id' is 1099511627776")) << model_error(c);
  c["eos_token_id"] = -3;
  EXPECT_TRUE(has(model_error(c), "'eos_token_id' is -3")) << model_error(c);

  auto g = io::parse_generation_config(json{{"eos_token_id", {1, int64_t{1} << 33}}},
                                       "generation_config.json");
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(has(g.status().message(), "generation_config.json: 'eos_token_id' must be a token"))
      << g.status().message();
}

TEST(HostileConfig, NegativeMaxWindowLayers) {
  json c = testing::tiny_config("Qwen2ForCausalLM");
  c["use_sliding_window"] = true;
  c["sliding_window"] = 16;
  c["max_window_layers"] = -5;  // before: wrote sliding_window[-5]
  EXPECT_TRUE(has(model_error(c), "'max_window_layers' must not be negative")) << model_error(c);
  c["max_window_layers"] = 1;
  auto r = models::parse_model_config(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->sliding_window, (std::vector<int64_t>{0, 16}));
}

TEST(HostileConfig, JsonNumberOverflowIsAnErrorNotAnException) {
  // Found by hand on a malformed generation_config.json: nlohmann throws out_of_range (not
  // parse_error) for 1e999, which escaped read_json and aborted the CLI.
  const std::string path = ::testing::TempDir() + "/qs_overflow.json";
  std::ofstream(path) << R"({"eos_token_id": 1e999})";
  auto j = read_json(path);
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(has(j.status().message(), path + ": invalid JSON")) << j.status().message();
  EXPECT_TRUE(has(j.status().message(), "number overflow")) << j.status().message();
}

TEST(HostileConfig, TokenizerIdsAreBounded) {
  // Before: the id table was resized to 2^31 entries for one token and the allocation threw.
  const json tj = json::parse(R"({"model": {"type": "BPE", "merges": [],
      "vocab": {"a": 0, "b": 2147483647}}, "pre_tokenizer": {"type": "ByteLevel"}})");
  auto t = tok::load_bpe_tokenizer_json(tj, "tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(has(t.status().message(),
                  "token id 2147483647 is above the vocabulary limit of "
                  "4194304"))
      << t.status().message();
}

}  // namespace
}  // namespace qs
