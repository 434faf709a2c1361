// unit: tokenizer_config.json / special_tokens_map.json reading, the added-token splitter,
// and load_tokenizer()'s choice of tokenizer by the files in a directory, with its errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../common/shared_data.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace qs::tok {
namespace {

namespace fs = std::filesystem;
const std::string kData = ::qs::testing::shared_data_dir();

class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("qs_tokenizer_load_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }
  void link(const std::string& name, const std::string& target) const {
    fs::create_symlink(target, path_ / name);
  }

 private:
  fs::path path_;
};

TEST(TokenizerConfig, StringsDictsNullsAndOverrides) {
  const std::string config = R"({
    "add_bos_token": true, "add_eos_token": false, "legacy": false,
    "tokenizer_class": "LlamaTokenizer",
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false,
                  "normalized": false, "rstrip": false, "single_word": false},
    "eos_token": "</s>",
    "pad_token": null,
    "added_tokens_decoder": {
      "32000": {"content": "<pad>", "special": true, "lstrip": true, "rstrip": false,
                "normalized": false, "single_word": false},
      "2": {"content": "</s>", "special": true}
    }
  })";
  const std::string map = R"({"bos_token": "<map-bos>", "unk_token": "<unk>",
                              "additional_special_tokens": ["<a>", {"content": "<b>"}]})";
  auto c = parse_tokenizer_config(config, map, "dir");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_TRUE(c->bos_token && c->eos_token && c->unk_token);
  EXPECT_EQ(c->bos_token->content, "<s>");  // tokenizer_config.json wins over the map
  EXPECT_TRUE(c->bos_token->special);
  EXPECT_EQ(c->eos_token->content, "</s>");
  EXPECT_EQ(c->unk_token->content, "<unk>");  // only the map says it
  EXPECT_FALSE(c->pad_token.has_value());
  ASSERT_EQ(c->additional_special_tokens.size(), 2u);
  EXPECT_EQ(c->additional_special_tokens[1].content, "<b>");
  EXPECT_EQ(c->add_bos_token, true);
  EXPECT_EQ(c->add_eos_token, false);
  EXPECT_EQ(c->legacy, false);
  EXPECT_FALSE(c->add_prefix_space.has_value());
  EXPECT_EQ(c->tokenizer_class, "LlamaTokenizer");
  ASSERT_EQ(c->added_tokens.size(), 2u);
  EXPECT_EQ(c->added_tokens[0].id, 2);  // sorted by id
  EXPECT_EQ(c->added_tokens[1].id, 32000);
  EXPECT_TRUE(c->added_tokens[1].lstrip);
  EXPECT_TRUE(c->added_tokens[1].special);

  auto none = parse_tokenizer_config("", "", "dir");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->bos_token || none->add_bos_token);
}

TEST(TokenizerConfig, ErrorsNameTheFileAndField) {
  struct Case {
    std::string config;
    std::string expect;
  };
  const Case cases[] = {
      {"{not json", "tokenizer_config.json"},
      {"[1]", "JSON object"},
      {R"({"add_bos_token": "yes"})", "add_bos_token"},
      {R"({"bos_token": 5})", "bos_token"},
      {R"({"bos_token": {"lstrip": true}})", "content"},
      {R"({"added_tokens_decoder": {"x": {"content": "a"}}})", "\"x\""},
      {R"({"added_tokens_decoder": {"-1": {"content": "a"}}})", "\"-1\""},
      {R"({"added_tokens_decoder": {"7": {"content": ""}}})", "empty"},
  };
  for (const Case& c : cases) {
    auto r = parse_tokenizer_config(c.config, "", "some/dir");
    ASSERT_FALSE(r.ok()) << c.config;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("some/dir"), std::string::npos) << r.status().message();
  }
  auto bad_map = parse_tokenizer_config("", "{", "d");
  ASSERT_FALSE(bad_map.ok());
  EXPECT_NE(bad_map.status().message().find("special_tokens_map.json"), std::string::npos);
}

TEST(TokenizerConfig, ReadsQwenConfig) {
  QS_SKIP_WITHOUT_SHARED_DATA("tokenizers/qwen2");
  auto c = read_tokenizer_config(kData + "/tokenizers/qwen2");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FALSE(c->bos_token.has_value());  // "bos_token": null
  ASSERT_TRUE(c->eos_token.has_value());
  EXPECT_EQ(c->eos_token->content, "<|im_end|>");
  EXPECT_EQ(c->add_bos_token, false);
  EXPECT_EQ(c->tokenizer_class, "Qwen2Tokenizer");
  ASSERT_FALSE(c->added_tokens.empty());
  EXPECT_EQ(c->added_tokens.front().id, 151643);
  EXPECT_EQ(c->added_tokens.front().content, "<|endoftext|>");
}

TEST(AddedTokenSplitter, LeftmostLongestWithStripFlags) {
  AddedTokenSplitter s({{10, "<a>", true},
                        {11, "<ab>", true},
                        {12, "<x>", true, true, true},
                        {13, "yo", false, false, false, true}});
  auto seg = s.split("hi<ab>there <x>  end");
  ASSERT_EQ(seg.size(), 5u);
  EXPECT_EQ(seg[0].text, "hi");
  EXPECT_EQ(seg[1].token_id, 11);   // "<ab>", not "<a>"
  EXPECT_EQ(seg[2].text, "there");  // lstrip of <x> took the space
  EXPECT_EQ(seg[3].token_id, 12);
  EXPECT_EQ(seg[4].text, "end");  // rstrip took both spaces
  EXPECT_EQ(seg[4].offset, 17u);
  // single_word: "yo" only outside words.
  auto words = s.split("yoyo yo");
  ASSERT_EQ(words.size(), 2u);
  EXPECT_EQ(words[0].text, "yoyo ");
  EXPECT_EQ(words[1].token_id, 13);
  EXPECT_TRUE(s.split("").empty());
  EXPECT_EQ(AddedTokenSplitter().split("abc").size(), 1u);
}

TEST(LoadTokenizer, MissingOrEmptyDirectoriesSayWhatWasExpected) {
  auto missing = load_tokenizer("/nonexistent/qs_model_dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/qs_model_dir"), std::string::npos);

  TempDir empty("empty");
  auto r = load_tokenizer(empty.str());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(empty.str()), std::string::npos);
  EXPECT_NE(r.status().message().find("tokenizer.json"), std::string::npos);
  EXPECT_NE(r.status().message().find("tokenizer.model"), std::string::npos);

  TempDir half("half");
  half.write("vocab.json", "{}");
  r = load_tokenizer(half.str());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("merges.txt is not"), std::string::npos);
}

TEST(LoadTokenizer, GarbageTokenizerModelIsDataLoss) {
  QS_SKIP_WITHOUT_SHARED_DATA("tokenizers/llama2");
  TempDir dir("garbage");
  dir.write("tokenizer.model", "this is neither protobuf nor ranks\n");
  auto r = load_tokenizer(dir.str());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("tokenizer.model"), std::string::npos);

  TempDir truncated("truncated");
  truncated.write("tokenizer.model", std::string("\x0A\x40\x0A\x05<unk>", 9));
  r = load_tokenizer(truncated.str());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);

  TempDir bad_config("bad_config");
  bad_config.link("tokenizer.model", kData + "/tokenizers/llama2/tokenizer.model");
  bad_config.write("tokenizer_config.json", "{\"add_bos_token\": 1}");
  r = load_tokenizer(bad_config.str());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("add_bos_token"), std::string::npos);
}

TEST(LoadTokenizer, SentencePieceModelWithConfig) {
  QS_SKIP_WITHOUT_SHARED_DATA("tokenizers/llama2");
  TempDir dir("spm");
  dir.link("tokenizer.model", kData + "/tokenizers/llama2/tokenizer.model");
  dir.write("tokenizer_config.json",
            R"({"add_bos_token": false, "add_eos_token": true, "eos_token": "</s>",
                "added_tokens_decoder": {"32000": {"content": "<pad>", "special": true}}})");
  auto r = load_tokenizer(dir.str());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(dynamic_cast<SentencePieceTokenizer*>(r->get()), nullptr);
  EXPECT_EQ((*r)->vocab_size(), 32001);
  EXPECT_EQ((*r)->encode("Hello<pad>", true), (std::vector<int32_t>{15043, 32000, 2}));
  EXPECT_EQ((*r)->decode({15043, 32000, 2}, true), "Hello");
}

TEST(LoadTokenizer, SentencePieceStyleTokenizerJson) {
  // A small tokenizer.json of the kind transformers writes for Llama (legacy form).
  TempDir dir("spm_json");
  std::string vocab = R"("<unk>": 0, "<s>": 1, "</s>": 2)";
  for (int b = 0; b < 256; ++b) {
    char entry[32];
    std::snprintf(entry, sizeof entry, ", \"<0x%02X>\": %d", b, 3 + b);
    vocab += entry;
  }
  vocab += ", \"\xE2\x96\x81\": 259, \"h\": 260, \"i\": 261, \"hi\": 262, \"\xE2\x96\x81hi\": 263";
  dir.write("tokenizer.json", R"({"version": "1.0",
    "added_tokens": [{"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}]},
    "decoder": null,
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
      "vocab": {)" + vocab + R"(}, "merges": ["h i", "▁ hi"]}})");
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>"})");
  auto r = load_tokenizer(dir.str());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(dynamic_cast<SentencePieceTokenizer*>(r->get()), nullptr);
  EXPECT_EQ((*r)->encode("hi hi!", true), (std::vector<int32_t>{1, 263, 263, 3 + '!'}));
  EXPECT_EQ((*r)->eos_id(), 2);
}

TEST(LoadTokenizer, UnsupportedTokenizerJsonFallsBackToTokenizerModel) {
  QS_SKIP_WITHOUT_SHARED_DATA("tokenizers/llama2");
  const std::string unigram = R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})";
  TempDir with_model("fallback");
  with_model.write("tokenizer.json", unigram);
  with_model.link("tokenizer.model", kData + "/tokenizers/llama2/tokenizer.model");
  auto r = load_tokenizer(with_model.str());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(dynamic_cast<SentencePieceTokenizer*>(r->get()), nullptr);

  TempDir alone("no_fallback");
  alone.write("tokenizer.json", unigram);
  r = load_tokenizer(alone.str());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("Unigram"), std::string::npos) << r.status().message();

  TempDir broken("broken_json");  // a broken file is an error, not a reason to look further
  broken.write("tokenizer.json", "{");
  broken.link("tokenizer.model", kData + "/tokenizers/llama2/tokenizer.model");
  r = load_tokenizer(broken.str());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.json"), std::string::npos);
}

TEST(LoadTokenizer, VocabMergesGoToByteLevelBpe) {
  QS_SKIP_WITHOUT_SHARED_DATA("tokenizers/qwen2");
  TempDir dir("qwen");
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"}) {
    dir.link(f, kData + "/tokenizers/qwen2/" + f);
  }
  auto r = load_tokenizer(dir.str());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(dynamic_cast<BpeTokenizer*>(r->get()), nullptr);
  EXPECT_EQ((*r)->eos_token(), "<|im_end|>");
  EXPECT_EQ((*r)->eos_id(), 151645);
  EXPECT_EQ((*r)->bos_id(), -1);
  const std::vector<int32_t> ids = (*r)->encode("<|im_start|>user", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 151644);  // special token cut out, no BOS added
}

TEST(LoadTokenizer, TiktokenModelIsSniffedByContent) {
  QS_SKIP_WITHOUT_SHARED_DATA("tokenizers/llama3");
  TempDir dir("tiktoken");
  dir.link("tokenizer.model", kData + "/tokenizers/llama3/tokenizer.model");
  auto r = load_tokenizer(dir.str());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(dynamic_cast<BpeTokenizer*>(r->get()), nullptr);
  EXPECT_EQ((*r)->bos_id(), 128000);
  EXPECT_EQ((*r)->vocab_size(), 128256);
}

}  // namespace
}  // namespace qs::tok
