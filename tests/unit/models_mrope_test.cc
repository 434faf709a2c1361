// tests: the two 3-D position rules of models/mrope.h on hand-made configs, with positions
// worked out by hand (what transformers' get_rope_index and get_chunked_index give for the same
// ids and grids): Qwen2.5-VL resumes after a video at its start + max(h, w) / merge,
// Qwen2.5-Omni one past the largest; a video with its sound track shares the bos and eos
// positions and ends on its last chunk; get_chunked_index's one-range-per-tick quirk pairs a
// video 4 s a patch with the audio of the next chunk; and every grid, span, marker or overflow
// that does not fit is an error, not a crash.
#include <gtest/gtest.h>

#include <vector>

#include "models/mrope.h"

namespace qs::models {
namespace {

constexpr int32_t kImage = 10, kVideo = 11, kAudio = 12;
constexpr int32_t kVisionBos = 20, kVisionEos = 21, kAudioBos = 22, kAudioEos = 23;
constexpr int32_t V = kVideo, A = kAudio;

ModelConfig omni() {
  ModelConfig c;
  c.family = Family::kQwen2_5_OmniThinker;
  c.mrope_section = {1, 1, 1};
  c.vision_merge_size = 2;
  c.image_token_id = kImage;
  c.video_token_id = kVideo;
  c.audio_token_id = kAudio;
  c.vision_start_token_id = kVisionBos;
  c.vision_end_token_id = kVisionEos;
  c.audio_start_token_id = kAudioBos;
  c.audio_end_token_id = kAudioEos;
  c.position_id_per_seconds = 25;
  c.seconds_per_chunk = 2;
  return c;
}

ModelConfig vl() {
  ModelConfig c = omni();
  c.family = Family::kQwen2_5_VL;
  c.audio_token_id = -1;
  c.vision_tokens_per_second = 2;
  return c;
}

MropeItem video_at(int64_t offset, VisionGrid grid, int64_t audio_tokens = 0) {
  MropeItem it;
  it.kind = MropeItem::Kind::kVideo;
  it.offset = offset;
  it.grid = grid;
  it.audio_tokens = audio_tokens;
  return it;
}

// Axis-major positions from per-token (t, h, w).
std::vector<int32_t> axes(const std::vector<std::vector<int32_t>>& thw) {
  std::vector<int32_t> out(3 * thw.size());
  for (size_t j = 0; j < thw.size(); ++j) {
    for (size_t a = 0; a < 3; ++a) out[a * thw.size() + j] = thw[j][a];
  }
  return out;
}

// A video of 2 frames of 1 x 2 merged tokens, 1 s a temporal patch, between text.
const std::vector<int32_t> kVideoPrompt = {5, kVisionBos, V, V, V, V, kVisionEos, 6};
const VisionGrid kTwoFrames{2, 2, 4, 1.0};

TEST(Mrope, QwenVlResumesAtTheStartPlusTheLongerSide) {
  // Ticks 2 apart (2 a second); the text resumes at 2 + max(1, 2) = 4, inside the video.
  const MropeItem items[] = {video_at(2, kTwoFrames)};
  auto p = mrope_positions(kVideoPrompt, vl(), items);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->positions, axes({{0, 0, 0},
                                {1, 1, 1},
                                {2, 2, 2},
                                {2, 2, 3},
                                {4, 2, 2},
                                {4, 2, 3},
                                {4, 4, 4},
                                {5, 5, 5}}));
  EXPECT_EQ(p->delta, 5 + 1 - 8);
}

TEST(Mrope, OmniResumesOnePastTheLargest) {
  // Ticks 25 apart; <|vision_eos|> at 27 + 1.
  const MropeItem items[] = {video_at(2, kTwoFrames)};
  auto p = mrope_positions(kVideoPrompt, omni(), items);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->positions, axes({{0, 0, 0},
                                {1, 1, 1},
                                {2, 2, 2},
                                {2, 2, 3},
                                {27, 2, 2},
                                {27, 2, 3},
                                {28, 28, 28},
                                {29, 29, 29}}));
  EXPECT_EQ(p->delta, 29 + 1 - 8);
}

TEST(Mrope, OmniVideoWithItsSoundSharesTheMarkersAndEndsOnItsLastChunk) {
  // One frame a token, ticks 0 and 25: both frames and all 3 audio tokens in one chunk.
  const std::vector<int32_t> ids = {5, kVisionBos, kAudioBos, V,          V, A,
                                    A, A,          kAudioEos, kVisionEos, 6};
  const MropeItem items[] = {video_at(3, {2, 2, 2, 1.0}, 3)};
  auto p = mrope_positions(ids, omni(), items);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  // The eos pair follows the audio chunk (4), not the video's largest (27), which sets the
  // delta only.
  EXPECT_EQ(p->positions, axes({{0, 0, 0},
                                {1, 1, 1},
                                {1, 1, 1},
                                {2, 2, 2},
                                {27, 2, 2},
                                {2, 2, 2},
                                {3, 3, 3},
                                {4, 4, 4},
                                {5, 5, 5},
                                {5, 5, 5},
                                {6, 6, 6}}));
  EXPECT_EQ(p->delta, 27 + 1 - 11);
}

TEST(Mrope, ChunksFollowTransformersOneRangePerTick) {
  // 4 s a patch: ticks 0, 100, 200. get_chunked_index closes one range per tick that reaches
  // the next multiple of 50, so frame 1 pairs with audio 50-99 and frame 2 with 100-149 (by
  // value ranges, frame 1 would go with 100-149).
  auto chunks = audio_in_video_chunks(omni(), {3, 2, 2, 4.0}, 150);
  ASSERT_TRUE(chunks.ok()) << chunks.status().to_string();
  ASSERT_EQ(chunks->size(), 3u);
  for (const AvChunk& ch : *chunks) {
    EXPECT_EQ(ch.video, 1);
    EXPECT_EQ(ch.audio, 50);
  }
  // 0.5 s a patch, 8 frames (ticks 0 to 87): 4 frames a chunk, then 60 audio tokens.
  chunks = audio_in_video_chunks(omni(), {8, 2, 2, 0.5}, 60);
  ASSERT_TRUE(chunks.ok());
  ASSERT_EQ(chunks->size(), 2u);
  EXPECT_EQ((*chunks)[0].video, 4);
  EXPECT_EQ((*chunks)[0].audio, 50);
  EXPECT_EQ((*chunks)[1].video, 4);
  EXPECT_EQ((*chunks)[1].audio, 10);
}

TEST(Mrope, WhatDoesNotFitIsAnError) {
  const ModelConfig c = omni();
  auto refused = [&](const std::vector<int32_t>& ids, const ModelConfig& config,
                     std::vector<MropeItem> items, const char* why) {
    auto p = mrope_positions(ids, config, items);
    ASSERT_FALSE(p.ok()) << why;
    EXPECT_FALSE(p.status().message().empty()) << why;
  };
  refused(kVideoPrompt, c, {video_at(2, {0, 2, 4})}, "no frames");
  refused(kVideoPrompt, c, {video_at(2, {2, 3, 4})}, "a side the merge does not divide");
  refused(kVideoPrompt, c, {video_at(2, {2, 2, 4, -0.5})}, "negative seconds");
  refused(kVideoPrompt, c, {video_at(-1, kTwoFrames)}, "before the prompt");
  refused(kVideoPrompt, c, {video_at(6, kTwoFrames)}, "past the prompt");
  refused(kVideoPrompt, c, {video_at(1, kTwoFrames)}, "over text");
  refused(kVideoPrompt, c, {}, "placeholders without items");
  refused(kVideoPrompt, c, {video_at(2, kTwoFrames), video_at(2, kTwoFrames)}, "twice");
  ModelConfig flat = c;
  flat.mrope_section.clear();
  refused(kVideoPrompt, flat, {video_at(2, kTwoFrames)}, "1-D RoPE");
  ModelConfig no_video = c;
  no_video.video_token_id = -1;
  refused(kVideoPrompt, no_video, {video_at(2, kTwoFrames)}, "no video id");
  MropeItem clip;
  clip.kind = MropeItem::Kind::kAudio;
  clip.offset = 2;
  clip.audio_tokens = 4;
  refused({5, kAudioBos, A, A, A, A, kAudioEos}, vl(), {clip}, "audio on Qwen2.5-VL");
  clip.audio_tokens = 0;
  refused({5, kAudioBos, A, A, A, A, kAudioEos}, c, {clip}, "a clip of nothing");

  const std::vector<int32_t> av = {5, kVisionBos, kAudioBos, V, V, A, A, A, kAudioEos, kVisionEos};
  const MropeItem with_sound = video_at(3, {2, 2, 2, 1.0}, 3);
  ASSERT_TRUE(mrope_positions(av, c, {&with_sound, 1}).ok());
  refused(av, c, {video_at(3, {2, 2, 2, 1.0}, 2)}, "a shorter track");
  refused(av, c, {video_at(3, {2, 2, 2, 1.0})}, "a silent video over audio placeholders");
  refused(av, vl(), {with_sound}, "a sound track on Qwen2.5-VL");
  ModelConfig unmarked = c;
  unmarked.audio_start_token_id = -1;
  refused(av, unmarked, {with_sound}, "no <|audio_bos|> id");
  std::vector<int32_t> swapped = av;
  std::swap(swapped[4], swapped[5]);
  refused(swapped, c, {with_sound}, "audio before the video's chunk");
  refused({kAudioBos, V, V, A, A, A, kAudioEos, kVisionEos}, c, {video_at(1, {2, 2, 2, 1.0}, 3)},
          "no room for <|vision_bos|>");
  EXPECT_FALSE(audio_in_video_chunks(vl(), {2, 2, 2, 1.0}, 3).ok());
  ModelConfig slow = c;
  slow.seconds_per_chunk = 0.01;  // 0.25 ticks a chunk
  EXPECT_FALSE(audio_in_video_chunks(slow, {2, 2, 2, 1.0}, 3).ok());

  // 12000 patches an hour apart at 25 ticks a second pass 2^30: refused, not wrapped.
  std::vector<int32_t> long_video(12002, V);
  long_video.front() = kVisionBos;
  long_video.back() = kVisionEos;
  refused(long_video, c, {video_at(1, {12000, 2, 2, 3600.0})}, "ticks past 2^30");
}

}  // namespace
}  // namespace qs::models
