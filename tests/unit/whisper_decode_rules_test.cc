// unit: Whisper's per-step logits rules (CTranslate2's ApplyTimestampRules with the suppress
// lists), the window split at timestamp pairs (faster-whisper's _split_segments_by_timestamps),
// the compression ratio (Python's zlib.compress at its default level gives the expected
// sizes) and the response formats, on a made-up vocabulary: text 0-9, end of text 10, specials
// 11-16, <|notimestamps|> 17, timestamps 18-29 (<|0.00|> .. <|0.22|>).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "audio/transcribe.h"
#include "audio/transcript_format.h"
#include "audio/whisper_decode.h"

namespace qs::audio {
namespace {

constexpr int64_t kVocab = 30;
constexpr float kInf = std::numeric_limits<float>::infinity();

WhisperTokens tokens() {
  WhisperTokens t;
  t.eot = 10;
  t.sot = 11;
  t.sot_prev = 12;
  t.sot_lm = 13;
  t.no_speech = 14;
  t.transcribe = 15;
  t.translate = 16;
  t.no_timestamps = 17;
  t.timestamp_begin = 18;
  t.timestamp_end = 29;
  return t;
}

WhisperDecodeOptions options() {
  WhisperDecodeOptions o;
  o.suppress_tokens = {3, 11, 12, 13, 14, 15, 16};
  o.begin_suppress_tokens = {0, 10};
  return o;
}

// Logits with every token allowed and text favoured, then the rules; returns which survive.
std::vector<bool> allowed(const std::vector<int32_t>& sampled, float text_logit = 5.0f,
                          const WhisperDecodeOptions& o = options()) {
  std::vector<float> logits(kVocab, 0.0f);
  for (int i = 0; i < 10; ++i) logits[i] = text_logit;
  apply_whisper_rules(tokens(), o, /*max_initial_timestamp_id=*/18 + 3, sampled, logits.data(),
                      kVocab);
  std::vector<bool> ok(kVocab);
  for (int i = 0; i < kVocab; ++i) ok[i] = logits[i] != -kInf;
  return ok;
}

TEST(WhisperRules, FirstStepIsATimestampWithinTheInitialLimit) {
  const std::vector<bool> ok = allowed({});
  for (int i = 0; i < 18; ++i) EXPECT_FALSE(ok[i]) << i;
  for (int i = 18; i <= 21; ++i) EXPECT_TRUE(ok[i]) << i;
  for (int i = 22; i < kVocab; ++i) EXPECT_FALSE(ok[i]) << i;
}

TEST(WhisperRules, WithoutTimestampsOnlyTheSuppressListsApply) {
  WhisperDecodeOptions o = options();
  o.without_timestamps = true;
  const std::vector<bool> first = allowed({}, 5.0f, o);
  EXPECT_FALSE(first[0]);   // begin-suppressed (a blank)
  EXPECT_FALSE(first[10]);  // and the end of text at the first step
  EXPECT_FALSE(first[3]);   // suppressed always
  EXPECT_TRUE(first[1]);
  EXPECT_TRUE(first[17]);
  EXPECT_TRUE(first[25]);
  const std::vector<bool> later = allowed({1}, 5.0f, o);
  EXPECT_TRUE(later[0]);
  EXPECT_TRUE(later[10]);
  EXPECT_FALSE(later[3]);
}

TEST(WhisperRules, AnOpeningTimestampIsFollowedByTextOrTheClosingOne) {
  // After "<|0.04|> text <|0.08|>": the pair is open, so no text, no earlier timestamp.
  const std::vector<bool> ok = allowed({20, 1, 22}, -50.0f);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(ok[i]) << i;
  for (int i = 18; i < 22; ++i) EXPECT_FALSE(ok[i]) << i;
  for (int i = 22; i < kVocab; ++i) EXPECT_TRUE(ok[i]) << i;
}

TEST(WhisperRules, AClosedPairIsFollowedByText) {
  const std::vector<bool> ok = allowed({20, 1, 22, 22});
  for (int i = 18; i < kVocab; ++i) EXPECT_FALSE(ok[i]) << i;
  EXPECT_TRUE(ok[1]);
  EXPECT_FALSE(ok[17]);  // <|notimestamps|> never
}

TEST(WhisperRules, TimestampsNeverDecrease) {
  const std::vector<bool> ok = allowed({20, 1, 2}, 50.0f);
  for (int i = 18; i <= 20; ++i) EXPECT_FALSE(ok[i]) << i;
  EXPECT_TRUE(ok[21]);
  EXPECT_TRUE(ok[1]);
}

TEST(WhisperRules, TimestampsWinWhenTheirSummedProbabilityBeatsEveryTextToken) {
  // Text tokens at logit 0.5, timestamps at 0: no single text token beats the timestamps'
  // total (12 x e^0 against e^0.5), so text is suppressed; at logit 3 text stays.
  const std::vector<bool> forced = allowed({20, 1}, 0.5f);
  for (int i = 0; i < 18; ++i) EXPECT_FALSE(forced[i]) << i;
  EXPECT_TRUE(forced[25]);
  const std::vector<bool> free = allowed({20, 1}, 3.0f);
  EXPECT_TRUE(free[1]);
  EXPECT_TRUE(free[25]);
}

TEST(WhisperSplit, CutsAtConsecutiveTimestampsAndSeeksToTheLastPair) {
  // <|0.00|> a b <|0.04|><|0.04|> c <|0.10|><|0.10|> d   (the last segment is unfinished)
  const std::vector<int32_t> toks = {18, 1, 2, 20, 20, 3, 23, 23, 4};
  const WindowSplit s = split_by_timestamps(tokens(), toks, 30.0, 3000, 30.0, 3000);
  ASSERT_EQ(s.segments.size(), 2u);
  EXPECT_DOUBLE_EQ(s.segments[0].start, 30.0);
  EXPECT_NEAR(s.segments[0].end, 30.04, 1e-9);
  EXPECT_EQ(s.segments[0].tokens, (std::vector<int32_t>{18, 1, 2, 20}));
  EXPECT_NEAR(s.segments[1].start, 30.04, 1e-9);
  EXPECT_NEAR(s.segments[1].end, 30.10, 1e-9);
  EXPECT_EQ(s.next_seek, 3000 + 5 * 2);  // the last complete pair, in input frames
}

TEST(WhisperSplit, ASingleTimestampEndingConsumesTheWindow) {
  const std::vector<int32_t> toks = {18, 1, 20, 20, 2, 22};
  const WindowSplit s = split_by_timestamps(tokens(), toks, 0.0, 1234, 12.34, 0);
  ASSERT_EQ(s.segments.size(), 2u);
  EXPECT_EQ(s.segments[1].tokens, (std::vector<int32_t>{20, 2, 22}));
  EXPECT_EQ(s.next_seek, 1234);
}

TEST(WhisperSplit, NoPairIsOneSegmentToTheLastTimestamp) {
  const WindowSplit s = split_by_timestamps(tokens(), {18, 1, 2, 24}, 5.0, 800, 8.0, 500);
  ASSERT_EQ(s.segments.size(), 1u);
  EXPECT_DOUBLE_EQ(s.segments[0].start, 5.0);
  EXPECT_NEAR(s.segments[0].end, 5.12, 1e-9);
  EXPECT_EQ(s.next_seek, 1300);
  const WindowSplit t = split_by_timestamps(tokens(), {1, 2}, 5.0, 800, 8.0, 500);
  EXPECT_NEAR(t.segments[0].end, 13.0, 1e-9);  // no timestamp: the whole window
}

TEST(WhisperCompression, MatchesPythonZlib) {
  // len(b) / len(zlib.compress(b)) in Python 3.11: 47 / 17 and 44 / 51.
  EXPECT_DOUBLE_EQ(compression_ratio("hello hello hello hello hello hello hello hello"),
                   47.0 / 17.0);
  EXPECT_DOUBLE_EQ(compression_ratio("The quick brown fox jumps over the lazy dog."), 44.0 / 51.0);
}

TEST(TranscriptFormat, EveryFormat) {
  Transcript t;
  t.language = "en";
  t.task = "transcribe";
  t.duration = 3725.5;
  TranscriptSegment a;
  a.id = 1;
  a.start = 0.0;
  a.end = 2.5;
  a.text = " Hello there.";
  a.tokens = {1, 2};
  TranscriptSegment b = a;
  b.id = 2;
  b.start = 3723.04;
  b.end = 3725.5;
  b.text = " Bye.";
  t.segments = {a, b};
  EXPECT_EQ(format_transcript(t, TranscriptFormat::kText), "Hello there. Bye.\n");
  EXPECT_EQ(format_transcript(t, TranscriptFormat::kJson), R"({"text":"Hello there. Bye."})");
  EXPECT_EQ(format_transcript(t, TranscriptFormat::kSrt),
            "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n"
            "2\n01:02:03,040 --> 01:02:05,500\nBye.\n\n");
  EXPECT_EQ(format_transcript(t, TranscriptFormat::kVtt),
            "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n"
            "01:02:03.040 --> 01:02:05.500\nBye.\n\n");
  const auto v = nlohmann::json::parse(format_transcript(t, TranscriptFormat::kVerboseJson));
  EXPECT_EQ(v["language"], "english");
  EXPECT_EQ(v["task"], "transcribe");
  EXPECT_EQ(v["segments"].size(), 2u);
  EXPECT_EQ(v["segments"][1]["text"], " Bye.");
  EXPECT_DOUBLE_EQ(v["segments"][1]["start"].get<double>(), 3723.04);
  EXPECT_FALSE(parse_transcript_format("xml").has_value());
}

}  // namespace
}  // namespace qs::audio
