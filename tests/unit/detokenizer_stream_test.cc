// tests: IncrementalDetokenizer with an in-memory tokenizer: whole characters only (an emoji
// split over byte tokens comes out on its last byte), SentencePiece leading spaces as a full
// decode writes them, special tokens skipped or kept, and pieces that add up to the decode.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "detokenizer_test_tokenizer.h"
#include "engine/detokenizer.h"

namespace qs {
namespace {

using testing::FakeTokenizer;

// Byte-level style vocabulary. 😀 is F0 9F 98 80, é is C3 A9.
FakeTokenizer byte_level() {
  return FakeTokenizer({"<eos>", "Hello", " world", "\xF0", "\x9F", "\x98", "\x80", "!", " ",
                        "<|im_end|>", "\xC3", "\xA9", "caf", "\xC3\xA9", "\xF0\x9F\x98\x80"},
                       {0, 9}, /*spm=*/false, /*eos_id=*/0);
}

// SentencePiece style vocabulary ("▁" is a space; decode strips the first one).
FakeTokenizer spm() {
  return FakeTokenizer({"<s>", "</s>", "\xE2\x96\x81Hello", "\xE2\x96\x81world", "!", "\xF0",
                        "\x9F", "\x98", "\x80", "\xE2\x96\x81"},
                       {0, 1}, /*spm=*/true, /*eos_id=*/1);
}

std::vector<std::string> stream(IncrementalDetokenizer& d, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(d.append(id));
  return out;
}

TEST(DetokenizerTest, EmojiOverByteTokensComesOutWhole) {
  const auto tok = byte_level();
  IncrementalDetokenizer d(tok, std::vector<int32_t>{1}, true);
  EXPECT_EQ(stream(d, {3, 4, 5, 6, 7}),
            (std::vector<std::string>{"", "", "", "\xF0\x9F\x98\x80", "!"}));
  EXPECT_EQ(d.flush(), "");
}

TEST(DetokenizerTest, TwoByteCharacterAfterText) {
  const auto tok = byte_level();
  IncrementalDetokenizer d(tok, std::vector<int32_t>{}, true);
  EXPECT_EQ(stream(d, {12, 10, 11, 8}), (std::vector<std::string>{"caf", "", "\xC3\xA9", " "}));
}

TEST(DetokenizerTest, IncompleteCharacterIsReleasedByFlush) {
  const auto tok = byte_level();
  IncrementalDetokenizer d(tok, std::vector<int32_t>{}, true);
  EXPECT_EQ(stream(d, {1, 3, 4}), (std::vector<std::string>{"Hello", "", ""}));
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");  // what decode makes of F0 9F
  EXPECT_EQ(d.flush(), "");
}

TEST(DetokenizerTest, SpmLeadingSpaceFollowsContext) {
  const auto tok = spm();
  {
    // With the prompt as context, the first output word keeps its space.
    IncrementalDetokenizer d(tok, std::vector<int32_t>{0, 2}, true);
    EXPECT_EQ(stream(d, {3, 4, 3}), (std::vector<std::string>{" world", "!", " world"}));
  }
  {
    // No context: the first token's space is the dummy prefix and is dropped, as decode does.
    IncrementalDetokenizer d(tok, std::vector<int32_t>{}, true);
    EXPECT_EQ(stream(d, {2, 3}), (std::vector<std::string>{"Hello", " world"}));
  }
  {
    // Only BOS before: skipped, so the first word still starts the text.
    IncrementalDetokenizer d(tok, std::vector<int32_t>{0}, true);
    EXPECT_EQ(stream(d, {2, 3}), (std::vector<std::string>{"Hello", " world"}));
  }
  {
    // A lone "▁" and then an emoji in byte pieces.
    IncrementalDetokenizer d(tok, std::vector<int32_t>{0, 2}, true);
    EXPECT_EQ(stream(d, {9, 5, 6, 7, 8}),
              (std::vector<std::string>{" ", "", "", "", "\xF0\x9F\x98\x80"}));
  }
}

TEST(DetokenizerTest, SpecialTokensSkippedOrKept) {
  const auto tok = byte_level();
  {
    IncrementalDetokenizer d(tok, std::vector<int32_t>{1}, /*skip_special_tokens=*/true);
    EXPECT_EQ(stream(d, {2, 9, 7}), (std::vector<std::string>{" world", "", "!"}));
  }
  {
    IncrementalDetokenizer d(tok, std::vector<int32_t>{1}, /*skip_special_tokens=*/false);
    EXPECT_EQ(stream(d, {2, 9, 7}), (std::vector<std::string>{" world", "<|im_end|>", "!"}));
  }
}

TEST(DetokenizerTest, PiecesConcatenateToTheDecodeOverLongRandomOutputs) {
  const auto tok = byte_level();
  // Groups of ids that each form whole characters, so the decode has no U+FFFD.
  const std::vector<std::vector<int32_t>> groups = {{1},      {2},  {3, 4, 5, 6}, {7},  {8}, {9},
                                                    {10, 11}, {12}, {13},         {14}, {0}};
  std::mt19937 rng(17);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int32_t> prompt, output;
    for (int i = 0; i < 3; ++i) {
      const auto& g = groups[rng() % groups.size()];
      prompt.insert(prompt.end(), g.begin(), g.end());
    }
    // Long enough for the detokenizer to compact its id buffer several times.
    for (int i = 0; i < 700; ++i) {
      const auto& g = groups[rng() % groups.size()];
      output.insert(output.end(), g.begin(), g.end());
    }
    for (bool skip : {true, false}) {
      IncrementalDetokenizer d(tok, prompt, skip);
      std::string text;
      for (int32_t id : output) {
        const std::string piece = d.append(id);
        EXPECT_EQ(testing::replace_invalid_utf8(piece), piece);
        text += piece;
      }
      text += d.flush();
      EXPECT_EQ(text, tok.decode(output, skip));
    }
  }
}

}  // namespace
}  // namespace qs
