// Golden: Llama-3 against Meta's own unit test (llama/test_tokenizer.py: BOS/EOS, decode, the
// header/eot chat format) and ollama's TestLlama (special-token splitting, digit runs, the
// pre-tokenizer's pieces), for both the tiktoken tokenizer.model and encoder.json + vocab.bpe.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/shared_data.h"
#include "core/json.h"
#include "core/mmap_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tiktoken.h"

namespace qs::tok {
namespace {

// Every test here reads the shared data.
QS_SHARED_DATA_FOR_ALL_TESTS("tokenizers/llama3");

const std::string kData = ::qs::testing::shared_data_dir();

nlohmann::json read_json(const std::string& path) {
  Result<std::string> text = read_file(path);
  EXPECT_TRUE(text.ok()) << path;
  return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
}

std::unique_ptr<BpeTokenizer> load(bool tiktoken) {
  Result<std::unique_ptr<BpeTokenizer>> tok =
      tiktoken ? load_llama3_tiktoken(kData + "/tokenizers/llama3/tokenizer.model") : [] {
        BpeFileOptions opt;
        opt.pretokenizer = PretokenizerKind::kLlama3;
        opt.added_tokens = llama3_special_tokens(128000);
        return load_bpe_vocab_merges(kData + "/tokenizers/llama3/encoder.json",
                                     kData + "/tokenizers/llama3/vocab.bpe", opt);
      }();
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

// Meta's encode_message / encode_dialog_prompt, spelled as the text they tokenize.
std::string header(const std::string& role) {
  return "<|start_header_id|>" + role + "<|end_header_id|>\n\n";
}

class TokenizerBpeLlama3 : public ::testing::TestWithParam<bool> {};

TEST_P(TokenizerBpeLlama3, MetaTestTokenizer) {
  std::unique_ptr<BpeTokenizer> tok = load(GetParam());
  ASSERT_NE(tok, nullptr);
  const nlohmann::json ref = read_json(kData + "/reference/meta_llama3_test_tokenizer.json");
  EXPECT_EQ(tok->piece_to_id("<|begin_of_text|>"),
            ref["special_tokens"]["<|begin_of_text|>"].get<int32_t>());
  EXPECT_EQ(tok->vocab_size(), 128256);
  EXPECT_EQ(tok->piece_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tok->piece_to_id("<|reserved_special_token_250|>"), 128255);

  // Meta's encode(bos=True, eos=True).
  ASSERT_TRUE(tok->set_bos_token("<|begin_of_text|>").ok());
  ASSERT_TRUE(tok->set_eos_token("<|end_of_text|>").ok());
  ASSERT_TRUE(tok->set_add_bos(true).ok());
  ASSERT_TRUE(tok->set_add_eos(true).ok());
  for (const auto& c : ref["encode"]) {
    EXPECT_EQ(tok->encode(c["text"].get<std::string>(), true),
              c["ids"].get<std::vector<int32_t>>());
  }
  ASSERT_TRUE(tok->set_add_eos(false).ok());
  for (const auto& c : ref["decode"]) {
    EXPECT_EQ(tok->decode(c["ids"].get<std::vector<int32_t>>(), false),
              c["text"].get<std::string>());
  }
  for (const auto& c : ref["encode_message"]) {
    const std::string text = header(c["message"]["role"].get<std::string>()) +
                             c["message"]["content"].get<std::string>() + "<|eot_id|>";
    EXPECT_EQ(tok->encode(text, false), c["ids"].get<std::vector<int32_t>>());
  }
  for (const auto& c : ref["encode_dialog_prompt"]) {
    std::string text;
    for (const auto& m : c["dialog"]) {
      text += header(m["role"].get<std::string>()) + m["content"].get<std::string>() + "<|eot_id|>";
    }
    text += header("assistant");
    // BOS comes from add_special_tokens here, not from the text.
    EXPECT_EQ(tok->encode(text, true), c["ids"].get<std::vector<int32_t>>());
  }
}

TEST_P(TokenizerBpeLlama3, OllamaTestLlama) {
  std::unique_ptr<BpeTokenizer> tok = load(GetParam());
  ASSERT_NE(tok, nullptr);
  const nlohmann::json ref = read_json(kData + "/reference/ollama_llama3.2_bpe_test_ids.json");
  ASSERT_EQ(ref["cases"].size(), 23u);
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> ids = tok->encode(text, false);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: \"" << text << "\"";
    EXPECT_EQ(tok->decode(ids, false), text);
  }
  ASSERT_EQ(ref["splits"].size(), 7u);
  for (const auto& c : ref["splits"]) {
    EXPECT_EQ(tok->pretokenize(c["text"].get<std::string>()),
              c["pieces"].get<std::vector<std::string>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, TokenizerBpeLlama3, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& param_info) {
                           return param_info.param ? "Tiktoken" : "EncoderJsonVocabBpe";
                         });

}  // namespace
}  // namespace qs::tok
