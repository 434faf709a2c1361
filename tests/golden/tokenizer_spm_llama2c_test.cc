// golden: llama2.c tokenizer.bin -> imported SentencePiece tokenizer.model. Our encoder on
// the imported model must give what llama2.c's own encode() gives (re-implemented here from
// its description, independently of the library), and the imported Llama 2 vocabulary must
// be the original tokenizer.model piece for piece and reproduce test.c's published ids.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/shared_data.h"
#include "core/mmap_file.h"
#include "importers/llama2c_tokenizer.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/tokenizer.h"

namespace qs::tok {

using importers::import_llama2c_tokenizer;
namespace {

// Every test here reads the shared data.
QS_SHARED_DATA_FOR_ALL_TESTS("models/tok512.bin");

namespace fs = std::filesystem;
const std::string kData = ::qs::testing::shared_data_dir();

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// llama2.c's run.c encode(), written from its algorithm: vocabulary strings use " ", the
// dummy prefix is the token " ", each UTF-8 character is looked up (byte fallback: byte + 3),
// then the adjacent pair whose concatenation scores highest is merged until none is left.
struct Llama2cVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::map<std::string, int> index;

  explicit Llama2cVocab(const std::string& path) {
    const std::string data = slurp(path);
    size_t pos = 4;
    while (pos + 8 <= data.size()) {
      float score;
      int32_t len;
      std::memcpy(&score, data.data() + pos, 4);
      std::memcpy(&len, data.data() + pos + 4, 4);
      pos += 8;
      index.emplace(data.substr(pos, len), static_cast<int>(tokens.size()));
      tokens.push_back(data.substr(pos, len));
      scores.push_back(score);
      pos += len;
    }
  }

  int lookup(const std::string& s) const {
    auto it = index.find(s);
    return it == index.end() ? -1 : it->second;
  }

  std::vector<int32_t> encode(const std::string& text) const {
    std::vector<int32_t> ids;
    if (!text.empty()) ids.push_back(lookup(" "));
    for (size_t i = 0; i < text.size();) {
      size_t len = 1;
      while (i + len < text.size() && len < 4 && (text[i + len] & 0xC0) == 0x80) ++len;
      const int id = lookup(text.substr(i, len));
      if (id >= 0) {
        ids.push_back(id);
      } else {
        for (size_t k = 0; k < len; ++k) ids.push_back(static_cast<unsigned char>(text[i + k]) + 3);
      }
      i += len;
    }
    while (true) {
      float best = -1e10f;
      int best_id = -1;
      size_t best_at = 0;
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        const int id = lookup(tokens[ids[i]] + tokens[ids[i + 1]]);
        if (id >= 0 && scores[id] > best) {
          best = scores[id];
          best_id = id;
          best_at = i;
        }
      }
      if (best_id < 0) break;
      ids[best_at] = best_id;
      ids.erase(ids.begin() + best_at + 1);
    }
    return ids;
  }
};

fs::path temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("qs_spm_llama2c_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

TEST(TokenizerSpmLlama2c, Tok512MatchesLlama2cEncoder) {
  const std::string bin = kData + "/models/tok512.bin";
  const fs::path dir = temp_dir("tok512");
  ASSERT_TRUE(import_llama2c_tokenizer(bin, dir.string()).ok());
  auto tok = load_tokenizer(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 512);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);

  const Llama2cVocab ref(bin);
  std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "Zo\xC3\xAB ate an apple \xF0\x9F\x8D\x8E and said: \"Yum!\"",  // byte fallback
      "  two  spaces\tand a tab\n",
  };
  // The first TinyStories paragraphs (one story line each).
  std::istringstream stories(slurp(kData + "/text/tinystories/tinystories-valid.txt.1000"));
  for (std::string line; std::getline(stories, line) && texts.size() < 40;) {
    if (!line.empty() && line.find('<') == std::string::npos) texts.push_back(line);
  }
  for (const std::string& text : texts) {
    const std::vector<int32_t> expected = ref.encode(text);
    EXPECT_EQ((*tok)->encode(text, /*add_special_tokens=*/false), expected) << text;
    std::vector<int32_t> with_bos = {1};
    with_bos.insert(with_bos.end(), expected.begin(), expected.end());
    EXPECT_EQ((*tok)->encode(text, /*add_special_tokens=*/true), with_bos) << text;
    EXPECT_EQ((*tok)->decode(with_bos, /*skip_special=*/true), text);
  }
  fs::remove_all(dir);
}

TEST(TokenizerSpmLlama2c, ImportedLlama2IsTheOriginalModel) {
  const fs::path dir = temp_dir("llama2");
  ASSERT_TRUE(
      import_llama2c_tokenizer(kData + "/tokenizers/llama2/tokenizer.bin", dir.string()).ok());

  // Piece for piece (text, score, type) the same as Meta's tokenizer.model.
  auto original_bytes = read_file(kData + "/tokenizers/llama2/tokenizer.model");
  auto imported_bytes = read_file((dir / "tokenizer.model").string());
  ASSERT_TRUE(original_bytes.ok() && imported_bytes.ok());
  auto original = parse_spm_model(*original_bytes, "original");
  auto imported = parse_spm_model(*imported_bytes, "imported");
  ASSERT_TRUE(original.ok() && imported.ok());
  ASSERT_EQ(imported->pieces.size(), original->pieces.size());
  for (size_t i = 0; i < original->pieces.size(); ++i) {
    ASSERT_EQ(imported->pieces[i].piece, original->pieces[i].piece) << "id " << i;
    ASSERT_EQ(imported->pieces[i].score, original->pieces[i].score) << "id " << i;
    ASSERT_EQ(imported->pieces[i].type, original->pieces[i].type) << "id " << i;
  }
  EXPECT_EQ(imported->model_type, SpmModelType::kBpe);
  EXPECT_TRUE(imported->byte_fallback);
  EXPECT_EQ(imported->add_dummy_prefix, original->add_dummy_prefix);
  EXPECT_EQ(imported->remove_extra_whitespaces, original->remove_extra_whitespaces);
  EXPECT_EQ(imported->escape_whitespaces, original->escape_whitespaces);
  EXPECT_EQ(imported->unk_id, 0);
  EXPECT_EQ(imported->bos_id, 1);
  EXPECT_EQ(imported->eos_id, 2);

  const auto config = nlohmann::json::parse(slurp((dir / "tokenizer_config.json").string()));
  EXPECT_EQ(config["tokenizer_class"], "LlamaTokenizer");
  EXPECT_EQ(config["bos_token"], "<s>");
  EXPECT_EQ(config["eos_token"], "</s>");
  EXPECT_EQ(config["unk_token"], "<unk>");
  EXPECT_EQ(config["add_bos_token"], true);
  EXPECT_EQ(config["added_tokens_decoder"]["1"]["content"], "<s>");
  const auto map = nlohmann::json::parse(slurp((dir / "special_tokens_map.json").string()));
  EXPECT_EQ(map["bos_token"], "<s>");
  EXPECT_EQ(map["eos_token"], "</s>");

  // And the imported directory reproduces llama2.c test.c's published ids.
  auto tok = load_tokenizer(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto ref =
      nlohmann::json::parse(slurp(kData + "/reference/llama2c_test_c_llama2_token_ids.json"));
  for (const auto& c : ref["cases"]) {
    EXPECT_EQ((*tok)->encode(c["text"].get<std::string>(), true),
              c["ids"].get<std::vector<int32_t>>())
        << c["text"];
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qs::tok
