// Golden: byte-level BPE against llama.cpp's tokenizer fixtures (models/ggml-vocab-*.inp/.out,
// ids made by HF tokenizers, no BOS) for GPT-2, Llama-3 (tiktoken ranks, encoder.json +
// vocab.bpe, and tokenizer.json) and Qwen2 (vocab.json + merges.txt, and tokenizer.json).
// Every case must match exactly and decode back to its input.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../common/shared_data.h"
#include "core/mmap_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tiktoken.h"

namespace qs::tok {
namespace {

// Every test here reads the shared data.
QS_SHARED_DATA_FOR_ALL_TESTS("tokenizers/llama.cpp-vocab");

const std::string kData = ::qs::testing::shared_data_dir() + "/tokenizers/";

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> read_cases(const std::string& stem) {
  Result<std::string> inp = read_file(kData + "llama.cpp-vocab/" + stem + ".inp");
  Result<std::string> out = read_file(kData + "llama.cpp-vocab/" + stem + ".out");
  EXPECT_TRUE(inp.ok() && out.ok());
  if (!inp.ok() || !out.ok()) return {};
  // Every case is followed by the separator.
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  size_t pos = 0;
  while (pos < inp->size()) {
    const size_t end = inp->find(sep, pos);
    EXPECT_NE(end, std::string::npos) << "unterminated case at byte " << pos;
    if (end == std::string::npos) break;
    cases.push_back({inp->substr(pos, end - pos), {}});
    pos = end + sep.size();
  }
  std::istringstream lines(*out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    EXPECT_LT(i, cases.size());
    if (i >= cases.size()) break;
    std::istringstream nums(line);
    int32_t id = 0;
    while (nums >> id) cases[i].ids.push_back(id);
    ++i;
  }
  EXPECT_EQ(i, cases.size()) << stem << ": .out lines vs .inp cases";
  return cases;
}

void expect_all_cases(const Tokenizer& tok, const std::string& stem) {
  const std::vector<Case> cases = read_cases(stem);
  ASSERT_EQ(cases.size(), 46u);  // the fixture set of llama.cpp @ 1eeb523c
  int matched = 0;
  for (const Case& c : cases) {
    const std::vector<int32_t> ids = tok.encode(c.text, /*add_special_tokens=*/false);
    EXPECT_EQ(ids, c.ids) << "text: \"" << c.text << "\"";
    matched += ids == c.ids;
    EXPECT_EQ(tok.decode(ids, /*skip_special=*/false), c.text);
  }
  EXPECT_EQ(matched, static_cast<int>(cases.size()));
}

// A tokenizer.json as HF would write it for these vocabularies, built from the vocab.json +
// merges.txt pair, so the JSON loader runs on the same data as the file-pair loader.
nlohmann::json make_tokenizer_json(const std::string& vocab_path, const std::string& merges_path,
                                   const std::string& pattern, bool ignore_merges,
                                   bool merges_as_pairs) {
  Result<std::string> vocab = read_file(vocab_path);
  Result<std::string> merges_text = read_file(merges_path);
  EXPECT_TRUE(vocab.ok() && merges_text.ok());
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream lines(merges_text.ok() ? *merges_text : "");
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (merges_as_pairs) {
      merges.push_back({line.substr(0, space), line.substr(space + 1)});
    } else {
      merges.push_back(line);
    }
  }
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = nlohmann::json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", pattern}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}}}}};
  j["post_processor"] = {{"type", "ByteLevel"},
                         {"add_prefix_space", true},
                         {"trim_offsets", false},
                         {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", ignore_merges},
                {"vocab", nlohmann::json::parse(vocab.ok() ? *vocab : "{}")},
                {"merges", merges}};
  return j;
}

TEST(TokenizerBpeLlamaCpp, Gpt2EncoderJsonVocabBpe) {
  BpeFileOptions opt;
  opt.pretokenizer = PretokenizerKind::kGpt2;
  auto tok = load_bpe_vocab_merges(kData + "gpt2/encoder.json", kData + "gpt2/vocab.bpe", opt);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 50257);
  expect_all_cases(**tok, "ggml-vocab-gpt-2.gguf");
}

TEST(TokenizerBpeLlamaCpp, Gpt2TokenizerJsonByteLevelRegex) {
  // GPT-2's own tokenizer.json has a lone ByteLevel pre-tokenizer that runs the GPT-2 regex.
  nlohmann::json j =
      make_tokenizer_json(kData + "gpt2/encoder.json", kData + "gpt2/vocab.bpe", "", false, false);
  j["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  auto tok = load_bpe_tokenizer_json(j, "gpt2 tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  expect_all_cases(**tok, "ggml-vocab-gpt-2.gguf");
}

TEST(TokenizerBpeLlamaCpp, Llama3Tiktoken) {
  auto tok = load_llama3_tiktoken(kData + "llama3/tokenizer.model");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 128256);
  expect_all_cases(**tok, "ggml-vocab-llama-bpe.gguf");
}

TEST(TokenizerBpeLlamaCpp, Llama3EncoderJsonVocabBpe) {
  BpeFileOptions opt;
  opt.pretokenizer = PretokenizerKind::kLlama3;  // implies ignore_merges
  auto tok = load_bpe_vocab_merges(kData + "llama3/encoder.json", kData + "llama3/vocab.bpe", opt);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  expect_all_cases(**tok, "ggml-vocab-llama-bpe.gguf");
}

TEST(TokenizerBpeLlamaCpp, Llama3NeedsIgnoreMerges) {
  // Without ignore_merges plain merge-by-merge BPE splits "Cửa Việt" differently (see
  // SOURCES.md), so the option must really change the result.
  BpeFileOptions opt;
  opt.pretokenizer = PretokenizerKind::kLlama3;
  opt.ignore_merges = false;
  auto tok = load_bpe_vocab_merges(kData + "llama3/encoder.json", kData + "llama3/vocab.bpe", opt);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  int mismatches = 0;
  for (const Case& c : read_cases("ggml-vocab-llama-bpe.gguf")) {
    mismatches += (*tok)->encode(c.text, false) != c.ids;
  }
  EXPECT_EQ(mismatches, 1);
}

TEST(TokenizerBpeLlamaCpp, Llama3TokenizerJsonPairMerges) {
  const nlohmann::json j =
      make_tokenizer_json(kData + "llama3/encoder.json", kData + "llama3/vocab.bpe",
                          std::string(pretokenizer_pattern(PretokenizerKind::kLlama3)),
                          /*ignore_merges=*/true, /*merges_as_pairs=*/true);
  auto tok = load_bpe_tokenizer_json(j, "llama3 tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  expect_all_cases(**tok, "ggml-vocab-llama-bpe.gguf");
}

TEST(TokenizerBpeLlamaCpp, Qwen2VocabMerges) {
  BpeFileOptions opt;
  opt.pretokenizer = PretokenizerKind::kQwen2;
  auto tok = load_bpe_vocab_merges(kData + "qwen2/vocab.json", kData + "qwen2/merges.txt", opt);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 151643);
  expect_all_cases(**tok, "ggml-vocab-qwen2.gguf");
}

TEST(TokenizerBpeLlamaCpp, Qwen2TokenizerJsonStringMerges) {
  const nlohmann::json j =
      make_tokenizer_json(kData + "qwen2/vocab.json", kData + "qwen2/merges.txt",
                          std::string(pretokenizer_pattern(PretokenizerKind::kQwen2)),
                          /*ignore_merges=*/false, /*merges_as_pairs=*/false);
  auto tok = load_bpe_tokenizer_json(j, "qwen2 tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  expect_all_cases(**tok, "ggml-vocab-qwen2.gguf");
}

}  // namespace
}  // namespace qs::tok
