// unit: the image pipeline's parsers against hostile files (issue 9, found by review while the
// fuzz targets clip_tokenizer, unigram_tokenizer, png and flux_pipeline were added): token ids
// narrowed to int32 or outside the vocabulary limit, a T5 piece long enough to make every
// position of a word walk it, padded lengths below one, and a PNG header that claims a
// buffer of gigabytes. Each error names the file and what is wrong.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "diffusion/png_image.h"
#include "tokenizer/clip_tokenizer.h"
#include "tokenizer/unigram_tokenizer.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class ImageParsersHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qs_image_hostile_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return (dir_ / name).string();
  }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

std::string clip_json(const std::string& vocab) {
  return R"({"model": {"type": "BPE", "end_of_word_suffix": "</w>", "merges": [], "vocab": {)" +
         vocab + R"(, "<|startoftext|>": 1, "<|endoftext|>": 2}}})";
}

TEST_F(ImageParsersHostile, ClipIdsAreBoundedNotNarrowed) {
  // Before: 4294967299 became 3, and -5 or 2^31-1 went on to index the embedding table.
  for (const char* id : {"4294967299", "-5", "2147483647", "18446744073709551615"}) {
    SCOPED_TRACE(id);
    write("tokenizer.json", clip_json(std::string(R"("a</w>": )") + id));
    auto t = tok::ClipTokenizer::load(dir());
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(has(t.status().message(), "tokenizer.json: vocab id " + std::string(id)))
        << t.status().message();
    EXPECT_TRUE(has(t.status().message(), "outside 0..4194303")) << t.status().message();
  }
  write("tokenizer.json", clip_json(R"("a</w>": 3)"));
  auto t = tok::ClipTokenizer::load(dir());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  // Lengths below two keep what fits instead of resizing to SIZE_MAX.
  EXPECT_EQ((*t)->encode_padded("a a", 1), std::vector<int32_t>({1}));
  EXPECT_EQ((*t)->encode_padded("a a", 2), std::vector<int32_t>({1, 2}));
  EXPECT_TRUE((*t)->encode_padded("a", 0).empty());
  EXPECT_EQ((*t)->encode_padded("a a", 5), std::vector<int32_t>({1, 3, 3, 2, 2}));
}

std::string t5_json(const std::string& pieces, const std::string& unk_id) {
  return R"({"model": {"type": "Unigram", "unk_id": )" + unk_id +
         R"(, "vocab": [["<unk>", 0], ["</s>", 0], ["<pad>", 0], )" + pieces +
         R"(]}, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581"}})";
}

TEST_F(ImageParsersHostile, T5UnkIdIsNotNarrowed) {
  // Before: 4294967296 was read into an int32 as 0 and accepted.
  for (const char* id : {"4294967296", "-1", "5"}) {
    SCOPED_TRACE(id);
    write("tokenizer.json", t5_json(R"(["\u2581a", -1])", id));
    auto t = tok::UnigramTokenizer::load(dir());
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(has(t.status().message(), "tokenizer.json: unk_id missing or out of range"))
        << t.status().message();
  }
}

TEST_F(ImageParsersHostile, T5PiecesAreBoundedAndLongWordsCostLinearTime) {
  write("tokenizer.json", t5_json("[\"" + std::string(1025, 'a') + "\", -1]", "0"));
  auto bad = tok::UnigramTokenizer::load(dir());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(has(bad.status().message(), "vocab piece 3 is 1025 bytes, above the limit of 1024"))
      << bad.status().message();
  // A vocabulary of runs of 'a' up to 1024 bytes and a 64 KiB word: each position walks
  // the trie, never builds a substring per candidate (that was ~ 2^16 * 2^10 * 2^9 byte copies).
  std::string pieces;
  for (int n = 1; n <= 512; n *= 2) {
    pieces += (n > 1 ? ", " : "") + std::string("[\"\\u2581") + std::string(n - 1, 'a') +
              "\", -1], [\"" + std::string(n, 'a') + "\", -2]";
  }
  pieces += ", [\"" + std::string(1024, 'a') + "\", -3]";
  write("tokenizer.json", t5_json(pieces, "0"));
  auto t = tok::UnigramTokenizer::load(dir());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto ids = (*t)->encode_padded(std::string(1 << 16, 'a'), 8);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 8u);
  EXPECT_EQ(ids->back(), (*t)->eos_id());
  auto none = (*t)->encode_padded("a", 0);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(has(none.status().message(), "max_length must be at least 1"));
  // The cap on tokens stops at a word boundary and keeps the ids before it.
  auto all = (*t)->encode("a aa aaaa a");
  auto cut = (*t)->encode("a aa aaaa a", 2);
  ASSERT_TRUE(all.ok() && cut.ok());
  ASSERT_GE(cut->size(), 2u);
  EXPECT_EQ(std::vector<int32_t>(all->begin(), all->begin() + 2),
            std::vector<int32_t>(cut->begin(), cut->begin() + 2));
}

TEST_F(ImageParsersHostile, PngHeaderCannotClaimGigabytes) {
  // A valid 1x1 PNG whose IHDR then claims 16384 x 16384 (768 MiB of RGB) with a fixed CRC:
  // the header alone set the buffer size before.
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    uint32_t crc = 0xffffffffu;
    for (unsigned char c : type + data) {
      crc ^= c;
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return be32(static_cast<uint32_t>(data.size())) + type + data + be32(~crc);
  };
  const std::string ihdr = be32(16384) + be32(16384) + std::string("\x08\x02\x00\x00\x00", 5);
  const std::string path =
      write("big.png", std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) +
                           chunk("IDAT", std::string("\x78\x9c\x03\x00\x00\x00\x00\x01", 8)) +
                           chunk("IEND", ""));
  int64_t w = 0, h = 0;
  std::vector<uint8_t> rgb;
  Status s = diffusion::read_png(path, &w, &h, &rgb);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.message(), "big.png: image size 16384x16384 out of range")) << s.message();
  EXPECT_TRUE(rgb.empty());
}

}  // namespace
}  // namespace qs
