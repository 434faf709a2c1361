// Unit: tiktoken rank files on a small hand-written file: base64 parsing, ranks acting as
// merge priorities (tiktoken's "lowest-ranked concatenation first"), the whole-piece lookup,
// format detection, and the errors malformed files get. Also the long/degenerate inputs the
// merge loop and PCRE2 must survive.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tokenizer/tiktoken.h"

namespace qs::tok {
namespace {

std::string base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v =
        (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(kAlphabet[(v >> (6 * k)) & 63]);
  }
  if (bytes.size() - i == 1) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += std::string{kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], '=', '='};
  } else if (bytes.size() - i == 2) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out +=
        std::string{kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], '='};
  }
  return out;
}

class BpeTiktoken : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("qs_bpe_tiktoken_" + name)).string();
    std::ofstream(path, std::ios::binary) << text;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const std::string& p : paths_) std::filesystem::remove(p);
  }
  // Ranks 0..255 are the bytes; "bc" 256 outranks "ab" 257; "abcd" 258 cannot be reached by
  // merging (no "abc" or "cd"), only by the whole-piece lookup.
  std::string toy_ranks() {
    std::string text;
    for (int b = 0; b < 256; ++b)
      text += base64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
    text += base64("bc") + " 256\n" + base64("ab") + " 257\n" + base64("abcd") + " 258\n";
    return text;
  }
  std::vector<std::string> paths_;
};

TEST_F(BpeTiktoken, RanksAreMergePriorities) {
  BpeFileOptions opt;
  opt.pretokenizer = PretokenizerKind::kLlama3;
  opt.added_tokens = llama3_special_tokens(259);
  auto tok = load_tiktoken(write("toy", toy_ranks()), opt);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  using Ids = std::vector<int32_t>;
  // "bc" (256) merges before "ab" (257); merge-list order "a b" first would give {257, 'c'}.
  EXPECT_EQ((*tok)->encode("abc", false), (Ids{'a', 256}));
  EXPECT_EQ((*tok)->encode("abcd", false), (Ids{258}));  // whole piece
  EXPECT_EQ((*tok)->encode("abcde", false), (Ids{'a', 256, 'd', 'e'}));
  EXPECT_EQ((*tok)->encode("xab", false), (Ids{'x', 257}));
  EXPECT_EQ((*tok)->encode("ab<|eot_id|>", false), (Ids{257, 268}));
  EXPECT_EQ((*tok)->vocab_size(), 259 + 256);
  EXPECT_EQ((*tok)->id_to_piece(' '), "\xC4\xA0");  // pieces are shown in byte-level form
  EXPECT_EQ((*tok)->token_bytes(257), "ab");
}

TEST_F(BpeTiktoken, FormatDetection) {
  EXPECT_TRUE(looks_like_tiktoken("IQ== 0\nIg== 1\n"));
  EXPECT_TRUE(looks_like_tiktoken("IQ== 0\r\n"));
  EXPECT_FALSE(looks_like_tiktoken("\x0A\x05hello"));  // SentencePiece protobuf
  EXPECT_FALSE(looks_like_tiktoken("IQ== zero\n"));
  EXPECT_FALSE(looks_like_tiktoken("I!== 0\n"));
  EXPECT_FALSE(looks_like_tiktoken(""));
}

TEST_F(BpeTiktoken, MalformedFilesGetErrors) {
  BpeFileOptions opt;
  auto bad_b64 = load_tiktoken(write("b64", "IQ== 0\n*** 1\n"), opt);
  ASSERT_FALSE(bad_b64.ok());
  EXPECT_EQ(bad_b64.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad_b64.status().message().find(":2:"), std::string::npos)
      << bad_b64.status().message();
  EXPECT_FALSE(load_tiktoken(write("rank", "IQ== x\n"), opt).ok());
  EXPECT_FALSE(load_tiktoken(write("norank", "IQ==\n"), opt).ok());
  EXPECT_FALSE(load_tiktoken(write("dup", "IQ== 0\nIg== 0\n"), opt).ok());
  EXPECT_FALSE(load_tiktoken(write("empty", ""), opt).ok());
  EXPECT_EQ(load_tiktoken("/nonexistent/tokenizer.model", opt).ok(), false);
  opt.ignore_merges = false;
  EXPECT_EQ(load_tiktoken(write("ok", toy_ranks()), opt).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(BpeTiktoken, LongDegenerateInputs) {
  BpeFileOptions opt;
  opt.pretokenizer = PretokenizerKind::kLlama3;
  auto tok = load_tiktoken(write("long", toy_ranks()), opt);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::string noise(1 << 16, '\0');
  uint32_t x = 12345;
  for (char& c : noise) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  for (const std::string& s :
       {std::string(1 << 16, ' '), std::string(1 << 16, 'a'), std::string(1 << 16, '\n'),
        std::string(1 << 16, '9'), std::string(1 << 16, '!'), noise}) {
    const std::vector<int32_t> ids = (*tok)->encode(s, false);
    std::string bytes;
    for (int32_t id : ids) bytes += (*tok)->token_bytes(id);
    EXPECT_EQ(bytes, s);
  }
}

}  // namespace
}  // namespace qs::tok
