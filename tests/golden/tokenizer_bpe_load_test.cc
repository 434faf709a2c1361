// Golden: the byte-level BPE tokenizers reached through load_tokenizer(dir), the way the
// engine loads them: Qwen2 from vocab.json + merges.txt + tokenizer_config.json (51 HF id
// lists, chat markup included), Llama-3 from Meta's tiktoken tokenizer.model (llama.cpp ids).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/shared_data.h"
#include "core/mmap_file.h"
#include "tokenizer/tokenizer.h"

namespace qs::tok {
namespace {

// Every test here reads the shared data.
QS_SHARED_DATA_FOR_ALL_TESTS("tokenizers/qwen2");

const std::string kData = ::qs::testing::shared_data_dir() + "/tokenizers/";

TEST(TokenizerBpeLoad, Qwen2Directory) {
  auto tok = load_tokenizer(kData + "qwen2");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->eos_id(), 151645);  // <|im_end|>, from tokenizer_config.json
  EXPECT_EQ((*tok)->bos_id(), -1);
  Result<std::string> text = read_file(kData + "qwen2/golden_tokens.json");
  ASSERT_TRUE(text.ok());
  int matched = 0;
  for (const auto& c : nlohmann::json::parse(*text)) {
    const std::string s = c["text"].get<std::string>();
    const std::vector<int32_t> ids = (*tok)->encode(s, /*add_special_tokens=*/true);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: \"" << s << "\"";
    matched += ids == c["ids"].get<std::vector<int32_t>>();
  }
  EXPECT_EQ(matched, 51);
}

TEST(TokenizerBpeLoad, Llama3TiktokenDirectory) {
  auto tok = load_tokenizer(kData + "llama3");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->bos_id(), 128000);
  EXPECT_EQ((*tok)->eos_id(), 128001);
  EXPECT_EQ((*tok)->vocab_size(), 128256);
  // HF's Llama-3 adds <|begin_of_text|> when asked for special tokens.
  EXPECT_EQ((*tok)->encode("hello world", true), (std::vector<int32_t>{128000, 15339, 1917}));
  EXPECT_EQ((*tok)->encode("hello world", false), (std::vector<int32_t>{15339, 1917}));
  EXPECT_TRUE((*tok)->is_special(128009));
  EXPECT_EQ((*tok)->decode({128000, 15339, 1917, 128009}, /*skip_special=*/true), "hello world");
}

}  // namespace
}  // namespace qs::tok
