// models: the 3-D positions of a multimodal prompt under M-RoPE, as transformers computes them.
// Text counts up on all three axes; the k = t * (h / m) * (w / m) placeholders of an image or
// video take (temporal, row, column) positions from where the text stopped; the prompt's
// delta (largest position + 1 - length) is what decode adds to the cache length on every axis.
// Two rules, by family:
//   - Qwen2.5-VL (Qwen2_5_VLModel.get_rope_index): a video's temporal patches are
//     tokens_per_second x seconds apart, and the text after an image or video resumes at its
//     start + max(h, w) / m, which for a long video is inside its temporal span.
//   - Qwen2.5-Omni's thinker, TMRoPE (Qwen2_5OmniThinkerForConditionalGeneration
//     .get_rope_index): a temporal patch is position_id_per_seconds ticks a second (25: 40 ms),
//     an audio clip counts like text, and what follows an item resumes one past the largest
//     position of the last block written. A video with its sound track (use_audio_in_video)
//     interleaves the two: both start one past <|vision_bos|><|audio_bos|> (which share a
//     position), their placeholders come in chunks of seconds_per_chunk (video chunk, then the
//     audio chunk of the same seconds), and <|audio_eos|><|vision_eos|> share the position one
//     past the last chunk's largest.
// Temporal ticks are computed in float32 and truncated, as transformers' float tensors and
// .long() do (0.58 s a patch at 25 a second gives 29 for the third patch, not 28).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "models/model_config.h"

namespace qs::models {

// One image or video of a prompt as its vision tower sees it: patches along time, height and
// width (before the spatial merge), and, for a video, the seconds one temporal patch spans
// (the processors' temporal_patch_size / fps).
struct VisionGrid {
  int64_t t = 1, h = 0, w = 0;
  double seconds_per_t = 1.0;  // videos only
  int64_t tokens(int64_t merge) const { return t * (h / merge) * (w / merge); }
};

// One item of a prompt as its positions see it.
struct MropeItem {
  enum class Kind : uint8_t { kImage, kVideo, kAudio };
  Kind kind = Kind::kImage;
  int64_t offset = 0;  // its first placeholder
  VisionGrid grid;     // image, video
  // Audio: its placeholders. A video: its sound track's (Qwen2.5-Omni's use_audio_in_video),
  // interleaved with the video's inside the item's span; 0: a video without its sound.
  int64_t audio_tokens = 0;

  bool audio_in_video() const { return kind == Kind::kVideo && audio_tokens > 0; }
  // Placeholders from `offset` on: the video's or image's, plus its sound track's.
  int64_t span(int64_t merge) const {
    return kind == Kind::kAudio ? audio_tokens : grid.tokens(merge) + audio_tokens;
  }
};

// One chunk of a video with its sound track: `video` video placeholders, then `audio` audio
// ones (either may be 0 once the other stream has run out).
struct AvChunk {
  int64_t video = 0, audio = 0;
};

// The chunks of a video with `audio_tokens` of sound, in prompt order, as
// Qwen2_5OmniProcessor.replace_video_with_audio_token lays the placeholders out and the
// thinker's get_rope_index reads them (its get_chunked_index, on the truncated ticks). Fails for
// a config without TMRoPE's position_id_per_seconds and seconds_per_chunk, or a bad grid.
Result<std::vector<AvChunk>> audio_in_video_chunks(const ModelConfig& config,
                                                   const VisionGrid& grid, int64_t audio_tokens);

// Whether `ids` hold `item`'s placeholders where it says: its span all of its kind's id, or for
// a video with its sound track the chunks above between <|vision_bos|><|audio_bos|> and
// <|audio_eos|><|vision_eos|>. The error says what is where.
Status check_placeholders(std::span<const int32_t> ids, const ModelConfig& config,
                          const MropeItem& item);

struct MropePositions {
  std::vector<int32_t> positions;  // axis-major [3 * ids.size()]
  int32_t delta = 0;
};

// The positions of `ids` with `items` (in prompt order, apart) at their offsets. Fails when an
// item does not fit its placeholders (check_placeholders), a placeholder id lies outside every
// item, or the model has no rule for an item (audio on Qwen2.5-VL).
Result<MropePositions> mrope_positions(std::span<const int32_t> ids, const ModelConfig& config,
                                       std::span<const MropeItem> items);

// The same for a prompt whose images and videos are each one run of placeholders (and whose
// audio clips, if any, are each one run of <|AUDIO|>): the runs take the grids of `images` /
// `videos` in order. Fails when the runs and the grids disagree (count or length).
Result<MropePositions> mrope_positions(std::span<const int32_t> ids, const ModelConfig& config,
                                       std::span<const VisionGrid> images,
                                       std::span<const VisionGrid> videos);

}  // namespace qs::models
