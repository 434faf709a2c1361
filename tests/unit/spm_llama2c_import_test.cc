// unit: reading llama2.c tokenizer.bin files and the errors for broken ones; random damage
// to a tokenizer.model never crashes the parser or the tokenizer built from it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "core/mmap_file.h"
#include "importers/llama2c_tokenizer.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace qs::tok {

using importers::import_llama2c_tokenizer;
using importers::read_llama2c_tokenizer;
namespace {

namespace fs = std::filesystem;

struct Token {
  float score;
  std::string text;
};

std::string make_bin(const std::vector<Token>& tokens, int32_t max_len = 8) {
  std::string out(reinterpret_cast<const char*>(&max_len), 4);
  for (const Token& t : tokens) {
    const int32_t len = static_cast<int32_t>(t.text.size());
    out.append(reinterpret_cast<const char*>(&t.score), 4);
    out.append(reinterpret_cast<const char*>(&len), 4);
    out.append(t.text);
  }
  return out;
}

class TempFile {
 public:
  explicit TempFile(const std::string& contents)
      : path_(fs::temp_directory_path() /
              ("qs_llama2c_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    std::ofstream(path_, std::ios::binary) << contents;
  }
  ~TempFile() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(SpmLlama2cImport, MapsPiecesAndTypes) {
  std::vector<Token> tokens = {{0, "<unk>"}, {0, "\n<s>\n"}, {0, "\n</s>\n"}, {0, "<0x41>"},
                               {-1, " t"},   {-2, "he"},     {-3, " "}};
  TempFile bin(make_bin(tokens));
  auto m = read_llama2c_tokenizer(bin.str());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->pieces.size(), 7u);
  EXPECT_EQ(m->pieces[0].type, SpmPieceType::kUnknown);
  EXPECT_EQ(m->pieces[1].piece, "<s>");
  EXPECT_EQ(m->pieces[1].type, SpmPieceType::kControl);
  EXPECT_EQ(m->pieces[2].piece, "</s>");
  EXPECT_EQ(m->pieces[3].type, SpmPieceType::kByte);
  EXPECT_EQ(m->pieces[4].piece, "\xE2\x96\x81t");
  EXPECT_EQ(m->pieces[4].score, -1.0f);
  EXPECT_EQ(m->pieces[6].piece, "\xE2\x96\x81");
  EXPECT_EQ(m->unk_id, 0);
  EXPECT_EQ(m->bos_id, 1);
  EXPECT_EQ(m->eos_id, 2);
  EXPECT_FALSE(m->byte_fallback);  // only one of the 256 byte pieces
  EXPECT_EQ(m->model_type, SpmModelType::kBpe);
  EXPECT_EQ(m->vocab_size, 7);
}

TEST(SpmLlama2cImport, BrokenFilesAreDataLossWithThePlace) {
  const std::vector<Token> ok = {{0, "<unk>"}, {0, "a"}};
  std::string truncated = make_bin(ok);
  truncated.resize(truncated.size() - 1);
  std::string negative = make_bin(ok);
  const int32_t minus = -3;
  std::memcpy(&negative[4 + 4], &minus, 4);
  struct Case {
    std::string bytes;
    std::string expect;
  };
  const Case cases[] = {
      {"ab", "too short"},
      {make_bin(ok, 0), "max_token_length"},
      {truncated, "token 1"},
      {negative, "length -3"},
      {make_bin(ok) + "xyz", "truncated"},
      {make_bin({{0, "a"}, {0, "b"}}), "<unk>"},
      {make_bin({{0, "<unk>"}, {0, " a"}, {0, " a"}}), "twice"},
      {make_bin({{0, "<unk>"}, {0, "\xFF"}}), "UTF-8"},
  };
  for (const Case& c : cases) {
    TempFile bin(c.bytes);
    auto m = read_llama2c_tokenizer(bin.str());
    ASSERT_FALSE(m.ok()) << c.expect;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find(bin.str()), std::string::npos) << m.status().message();
  }
  EXPECT_FALSE(read_llama2c_tokenizer("/nonexistent/tokenizer.bin").ok());
}

TEST(SpmLlama2cImport, UnwritableOutputIsAnError) {
  TempFile bin(make_bin({{0, "<unk>"}, {0, "a"}}));
  TempFile blocker("a file where a directory should go");
  const Status s = import_llama2c_tokenizer(bin.str(), blocker.str() + "/out");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(blocker.str()), std::string::npos) << s.message();
}

TEST(SpmLlama2cImport, DamagedModelsNeverCrash) {
  std::vector<Token> tokens = {{0, "<unk>"}, {0, "\n<s>\n"}, {0, "\n</s>\n"}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back({0, name});
  }
  for (const char* p : {" ", "a", "b", " a", "ab", " ab"}) tokens.push_back({-1, p});
  TempFile bin(make_bin(tokens));
  auto model = read_llama2c_tokenizer(bin.str());
  ASSERT_TRUE(model.ok());
  const std::string good = serialize_spm_model(*model);
  std::mt19937 rng(123);
  int parsed = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string bad = good;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
      bad[rng() % bad.size()] = static_cast<char>(rng());
    }
    if (rng() % 4 == 0) bad.resize(rng() % bad.size());
    auto m = parse_spm_model(bad, "damaged");
    if (!m.ok()) continue;
    ++parsed;
    auto t = SentencePieceTokenizer::from_model(*m, {}, "damaged");
    if (!t.ok()) continue;
    const std::vector<int32_t> ids = (*t)->encode(" ab a\xC3\xA9 <s>", true);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < (*t)->vocab_size());
    (void)(*t)->decode(ids, false);
  }
  EXPECT_GT(parsed, 0);  // some damage lands in scores or text and still parses
}

}  // namespace
}  // namespace qs::tok
