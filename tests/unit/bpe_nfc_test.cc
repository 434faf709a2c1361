// Unit: NFC normalization (utf8_nfc.h) on the cases UAX #15 cares about (composition,
// Hangul, singletons, composition exclusions, canonical reordering, blocking), with expected
// strings taken from Python's unicodedata.normalize("NFC", ...), and its use by the BPE
// tokenizer when tokenizer.json names an NFC normalizer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8_nfc.h"

namespace qs::tok {
namespace {

TEST(BpeNfc, KnownCases) {
  EXPECT_EQ(utf8_nfc(""), "");
  EXPECT_EQ(utf8_nfc("plain ASCII\n"), "plain ASCII\n");
  EXPECT_EQ(utf8_nfc("e\xCC\x81"), "\xC3\xA9");                                 // e + U+0301 -> é
  EXPECT_EQ(utf8_nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(utf8_nfc("\xE2\x84\xAB"), "\xC3\x85");                  // U+212B ANGSTROM SIGN -> Å
  EXPECT_EQ(utf8_nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // U+0958: excluded
  EXPECT_EQ(utf8_nfc("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");         // marks reordered, then ậ
  EXPECT_EQ(utf8_nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");    // reordered, nothing composes
  EXPECT_EQ(utf8_nfc("A\xCC\x8A\xCC\x81"), "\xC7\xBA");             // two steps: Å then Ǻ
  EXPECT_EQ(utf8_nfc("Cu\xCC\x9Bo\xCC\x81"
                     "a"),
            "C\xC6\xB0\xC3\xB3"
            "a");
  EXPECT_EQ(utf8_nfc("\xC3\xA9"), "\xC3\xA9");  // already NFC
}

TEST(BpeNfc, IllFormedBytesStayAndBlock) {
  // The 0xFF byte stays, and the accent after it does not reach back over it to the e.
  EXPECT_EQ(utf8_nfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");
  EXPECT_EQ(utf8_nfc("\xE2\x82"), "\xE2\x82");
}

TEST(BpeNfc, TokenizerJsonNormalizerApplies) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  vocab[byte_level_encode("\xC3\xA9")] = 256;
  nlohmann::json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", {byte_level_encode("\xC3") + " " + byte_level_encode("\xA9")}}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  auto plain = load_bpe_tokenizer_json(j, "toy");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ((*plain)->encode("e\xCC\x81", false), (std::vector<int32_t>{'e', 0xCC, 0x81}));
  j["normalizer"] = {{"type", "NFC"}};
  auto nfc = load_bpe_tokenizer_json(j, "toy");
  ASSERT_TRUE(nfc.ok()) << nfc.status().to_string();
  EXPECT_EQ((*nfc)->encode("e\xCC\x81", false), (std::vector<int32_t>{256}));
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_EQ(load_bpe_tokenizer_json(j, "toy").status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace qs::tok
