// golden: the Llama 2 SentencePiece tokenizer (shared/data/tokenizers/llama2/tokenizer.model)
// against published ids: llama.cpp's test-tokenizer-0 fixtures (made with HF's tokenizer, no
// BOS) and llama2.c test.c's prompts (Meta's reference tokenizer, with BOS).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/shared_data.h"
#include "tokenizer/tokenizer.h"

namespace qs::tok {
namespace {

// Every test here reads the shared data.
QS_SHARED_DATA_FOR_ALL_TESTS("tokenizers/llama2");

const std::string kData = ::qs::testing::shared_data_dir();

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(sep, pos);
    if (hit == std::string::npos) break;
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::unique_ptr<Tokenizer> load_llama2() {
  auto t = load_tokenizer(kData + "/tokenizers/llama2");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(TokenizerSpmLlama2, LlamaCppVocabFixtures) {
  auto tok = load_llama2();
  ASSERT_NE(tok, nullptr);
  const std::string base = kData + "/tokenizers/llama.cpp-vocab/ggml-vocab-llama-spm.gguf";
  const std::vector<std::string> inputs = split(slurp(base + ".inp"), "\n__ggml_vocab_test__\n");
  std::vector<std::string> outputs = split(slurp(base + ".out"), "\n");
  // The .inp file ends with a separator; the .out file with a newline.
  ASSERT_GE(inputs.size(), 47u);
  ASSERT_GE(outputs.size(), 47u);
  int passed = 0;
  for (size_t i = 0; i < 47; ++i) {
    std::vector<int32_t> expected;
    std::istringstream ids(outputs[i]);
    for (int32_t id; ids >> id;) expected.push_back(id);
    const std::vector<int32_t> got = tok->encode(inputs[i], /*add_special_tokens=*/false);
    EXPECT_EQ(got, expected) << "case " << i << ": \"" << inputs[i] << "\"";
    // Decoding gives the text back: identity normalization loses nothing.
    EXPECT_EQ(tok->decode(got, /*skip_special=*/true), inputs[i]) << "case " << i;
    passed += got == expected;
  }
  EXPECT_EQ(passed, 47);
}

TEST(TokenizerSpmLlama2, Llama2cTestPrompts) {
  auto tok = load_llama2();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->vocab_size(), 32000);
  const auto j =
      nlohmann::json::parse(slurp(kData + "/reference/llama2c_test_c_llama2_token_ids.json"));
  ASSERT_EQ(j["cases"].size(), 5u);
  for (const auto& c : j["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> expected = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok->encode(text, /*add_special_tokens=*/true);
    EXPECT_EQ(got, expected) << "\"" << text << "\"";
    EXPECT_EQ(tok->decode(got, /*skip_special=*/true), text);
  }
}

TEST(TokenizerSpmLlama2, SpecialTokensAndDecode) {
  auto tok = load_llama2();
  ASSERT_NE(tok, nullptr);
  // HF's LlamaTokenizer (legacy) cuts <s> and </s> out of the text and gives each run of
  // text its own dummy prefix: "▁Hello" | </s> | "▁world".
  const std::vector<int32_t> ids = tok->encode("Hello</s>world", false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], 15043);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(ids[2], tok->piece_to_id("\xE2\x96\x81world"));
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_TRUE(tok->is_special(2));
  EXPECT_TRUE(tok->is_special(0));
  EXPECT_FALSE(tok->is_special(15043));
  EXPECT_EQ(tok->decode({1, 15043, 2}, /*skip_special=*/false), "<s>Hello</s>");
  EXPECT_EQ(tok->decode({1, 15043, 2}, /*skip_special=*/true), "Hello");
  // Byte pieces: raw bytes for streaming, joined into UTF-8 by decode.
  EXPECT_EQ(tok->token_bytes(3 + 0xF0), std::string("\xF0"));
  EXPECT_EQ(tok->token_bytes(15043), " Hello");
  EXPECT_EQ(tok->decode({243, 162, 169, 156}, true), "\xF0\x9F\xA6\x99");  // 🦙
  EXPECT_EQ(tok->decode({243, 162}, true), "\xEF\xBF\xBD");  // truncated -> one U+FFFD
  EXPECT_EQ(tok->id_to_piece(15043), "\xE2\x96\x81Hello");
  EXPECT_EQ(tok->piece_to_id("not a piece"), -1);
}

}  // namespace
}  // namespace qs::tok
