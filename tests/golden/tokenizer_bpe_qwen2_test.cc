// Golden: Qwen2.5's tokenizer (vocab.json + merges.txt + the added tokens of
// tokenizer_config.json) against 51 id lists made by HF `tokenizers` without special-token
// insertion (qwen2/golden_tokens.json), including chat markup written in the text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/shared_data.h"
#include "core/mmap_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace qs::tok {
namespace {

// Every test here reads the shared data.
QS_SHARED_DATA_FOR_ALL_TESTS("tokenizers/qwen2");

const std::string kQwen = ::qs::testing::shared_data_dir() + "/tokenizers/qwen2/";

std::unique_ptr<BpeTokenizer> load_qwen2() {
  Result<TokenizerConfig> cfg = read_tokenizer_config(kQwen);
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  if (!cfg.ok()) return nullptr;
  BpeFileOptions opt;
  opt.pretokenizer = PretokenizerKind::kQwen2;
  opt.added_tokens = cfg->added_tokens;
  auto tok = load_bpe_vocab_merges(kQwen + "vocab.json", kQwen + "merges.txt", opt);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  if (!tok.ok()) return nullptr;
  EXPECT_TRUE((*tok)->set_eos_token(cfg->eos_token->content).ok());
  return std::move(tok).value();
}

TEST(TokenizerBpeQwen2, GoldenTokens) {
  std::unique_ptr<BpeTokenizer> tok = load_qwen2();
  ASSERT_NE(tok, nullptr);
  Result<std::string> text = read_file(kQwen + "golden_tokens.json");
  ASSERT_TRUE(text.ok());
  const nlohmann::json cases = nlohmann::json::parse(*text);
  ASSERT_EQ(cases.size(), 51u);
  int matched = 0;
  for (const auto& c : cases) {
    const std::string s = c["text"].get<std::string>();
    const std::vector<int32_t> expected = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok->encode(s, /*add_special_tokens=*/false);
    EXPECT_EQ(ids, expected) << "text: \"" << s << "\"";
    matched += ids == expected;
    EXPECT_EQ(tok->decode(ids, /*skip_special=*/false), s);
  }
  EXPECT_EQ(matched, 51);
}

TEST(TokenizerBpeQwen2, SpecialTokens) {
  std::unique_ptr<BpeTokenizer> tok = load_qwen2();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 151669);
  EXPECT_EQ(tok->eos_id(), 151645);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->piece_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok->piece_to_id("<think>"), 151667);
  EXPECT_TRUE(tok->is_special(151644));
  EXPECT_FALSE(tok->is_special(151667));  // <think> is added but not special
  EXPECT_FALSE(tok->is_special(9707));
  // Added tokens are found inside words, and non-special ones survive skip_special.
  const std::vector<int32_t> ids = tok->encode("a<think>b</think><|im_end|>", true);
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(ids[1], 151667);
  EXPECT_EQ(ids[3], 151668);
  EXPECT_EQ(ids[4], 151645);
  EXPECT_EQ(tok->decode(ids, /*skip_special=*/true), "a<think>b</think>");
  EXPECT_EQ(tok->decode(ids, /*skip_special=*/false), "a<think>b</think><|im_end|>");
  // No BOS for Qwen: add_special_tokens changes nothing.
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{9707, 1879}));
}

TEST(TokenizerBpeQwen2, NormalizesToNfc) {
  // Qwen2Tokenizer (and Qwen2's tokenizer.json normalizer) apply NFC first, so decomposed
  // input gets the ids of its composed form.
  std::unique_ptr<BpeTokenizer> tok = load_qwen2();
  ASSERT_NE(tok, nullptr);
  const std::string composed =
      "C\xE1\xBB\xAD"
      "a Vi\xE1\xBB\x87t";  // "Cửa Việt"
  const std::string decomposed =
      "Cu\xCC\x9B\xCC\x89"
      "a Vie\xCC\xA3\xCC\x82t";  // its NFD
  EXPECT_EQ(tok->encode(decomposed, false), tok->encode(composed, false));
  EXPECT_EQ(tok->decode(tok->encode(decomposed, false), false), composed);
}

}  // namespace
}  // namespace qs::tok
