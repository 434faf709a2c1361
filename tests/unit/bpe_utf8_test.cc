// Unit: UTF-8 validation and lossy repair (utf8.h) and the GPT-2 byte <-> character map
// (byte_level.h) that every byte-level BPE vocabulary is written in.
#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace qs::tok {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(BpeUtf8, CharLenAndValidity) {
  char32_t cp = 0;
  EXPECT_EQ(utf8_char_len("a", 0, &cp), 1u);
  EXPECT_EQ(cp, U'a');
  EXPECT_EQ(utf8_char_len("\xC3\xA9", 0, &cp), 2u);  // é
  EXPECT_EQ(cp, 0xE9u);
  EXPECT_EQ(utf8_char_len("\xF0\x9F\xA6\x99", 0, &cp), 4u);  // 🦙
  EXPECT_EQ(cp, 0x1F999u);
  EXPECT_EQ(utf8_char_len("\xC0\x80", 0), 0u);          // overlong NUL
  EXPECT_EQ(utf8_char_len("\xED\xA0\x80", 0), 0u);      // surrogate D800
  EXPECT_EQ(utf8_char_len("\xF4\x90\x80\x80", 0), 0u);  // past U+10FFFF
  EXPECT_EQ(utf8_char_len("\xE2\x82", 0), 0u);          // truncated
  EXPECT_EQ(utf8_char_len("\x80", 0), 0u);              // stray continuation
  EXPECT_TRUE(utf8_is_valid(""));
  EXPECT_TRUE(utf8_is_valid("Cửa Việt 🚀"));
  EXPECT_FALSE(utf8_is_valid("ab\xFF"));
  EXPECT_EQ(utf8_valid_prefix("ab\xFF"
                              "cd"),
            2u);
}

TEST(BpeUtf8, MakeValidReplacesMaximalSubparts) {
  // One U+FFFD per maximal subpart (Unicode 15 §3.9, as Rust's from_utf8_lossy): a
  // truncated 4-byte sequence is one, bytes that can never start a valid sequence are one each.
  EXPECT_EQ(utf8_make_valid("ok"), "ok");
  EXPECT_EQ(utf8_make_valid("a\xF0\x9F\xA6"
                            "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(utf8_make_valid("\xC0\x80"), kFffd + kFffd);
  EXPECT_EQ(utf8_make_valid("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(utf8_make_valid("\xE2\x82"
                            "x"),
            kFffd + "x");
  EXPECT_EQ(utf8_make_valid("\xFF\xFE"), kFffd + kFffd);
}

TEST(BpeByteLevel, MapIsGpt2s) {
  EXPECT_EQ(byte_level_encode(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level_encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level_encode("Hi!"), "Hi!");      // printable ASCII stands for itself
  EXPECT_EQ(byte_level_encode("\xC3\xA9"), "\xC3\x83\xC2\xA9");    // é -> "Ã©"
  EXPECT_EQ(byte_level_encode(std::string(1, '\0')), "\xC4\x80");  // Ā
  EXPECT_EQ(byte_level_encode("\xAD"), "\xC5\x83");  // soft hyphen is the 68th remapped byte
}

TEST(BpeByteLevel, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string text = byte_level_encode(all);
  EXPECT_TRUE(utf8_is_valid(text));
  const std::optional<std::string> back = byte_level_decode(text);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, all);
}

TEST(BpeByteLevel, DecodeRejectsForeignText) {
  EXPECT_FALSE(byte_level_decode(" ").has_value());             // a raw space is not in the map
  EXPECT_FALSE(byte_level_decode("\xE4\xBD\xA0").has_value());  // 你
  EXPECT_FALSE(byte_level_decode("\xC4").has_value());          // not UTF-8
  EXPECT_EQ(byte_level_decode(""), std::optional<std::string>(""));
}

}  // namespace
}  // namespace qs::tok
