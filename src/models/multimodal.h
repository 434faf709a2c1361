// models: what a multimodal prompt carries besides its token ids, and the one interface the
// engine calls to encode it. An image, a video or a sound clip is a span of placeholder tokens
// in the prompt (each the model's image, video or audio token id), the inputs its tower reads,
// and a hash of its source; the engine encodes the items of a request once, scatters the
// embeddings into the placeholder rows of each prefill chunk (ForwardBatch::embeddings), gives
// M-RoPE models the items' 3-D positions (mrope.h), and mixes the hashes into the prefix
// cache's block keys so that a cached block is shared only by prompts with the same items.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/mrope.h"

namespace qs::models {

// A video may carry its sound track (Qwen2.5-Omni's use_audio_in_video: `frames` > 0 and
// `features` on a video item). Its span then holds the video's placeholders and the track's
// interleaved in seconds_per_chunk chunks (mrope.h: audio_in_video_chunks), between
// <|vision_bos|><|audio_bos|> and <|audio_eos|><|vision_eos|>; the k-th video placeholder of
// the span takes the vision tower's k-th row, the k-th audio placeholder the audio tower's k-th
// row, as vLLM's is_embed mask over one placeholder range does. One item, one hash, one span:
// the track belongs to its video, and the positions of both come from the same clock.
struct MultimodalItem {
  bool video = false;
  bool audio = false;  // a sound clip (its log-mel frames in `features`), not an image
  int64_t offset = 0;  // the first of its placeholders in the prompt
  VisionGrid grid;     // images, videos: patches along time, height, width (before merging)
  std::shared_ptr<const std::vector<float>> pixels;  // [grid.t * h * w, patch values]
  int64_t frames = 0;  // audio, or a video's sound track: log-mel frames (0: none)
  std::shared_ptr<const std::vector<float>> features;  // [n_mels, frames]
  // Of everything the item's rows and positions come from (the source bytes, and for a video
  // its sampling); 0: not cacheable.
  uint64_t hash = 0;

  bool audio_in_video() const { return video && frames > 0; }
  // As the positions see it, the sound (a clip's or a video's track) `audio_tokens` long.
  MropeItem mrope_item(int64_t audio_tokens) const {
    MropeItem m;
    m.kind = audio   ? MropeItem::Kind::kAudio
             : video ? MropeItem::Kind::kVideo
                     : MropeItem::Kind::kImage;
    m.offset = offset;
    m.grid = grid;
    m.audio_tokens = audio || audio_in_video() ? audio_tokens : 0;
    return m;
  }
};

// A model's vision tower as the engine sees it: patches in, one embedding of the decoder's
// width per merged token out, the items in order.
class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  virtual int64_t merge_size() const = 0;
  virtual int64_t patch_values() const = 0;  // pixel values per patch
  virtual int64_t out_width() const = 0;
  virtual Status encode(const float* pixels, std::span<const VisionGrid> grids,
                        std::vector<float>* out, ThreadPool& pool) const = 0;
};

// A model's audio tower: one clip's log-mel frames in, one embedding of the decoder's width
// per audio placeholder out.
class AudioEncoder {
 public:
  virtual ~AudioEncoder() = default;
  virtual int64_t n_mels() const = 0;
  virtual int64_t out_width() const = 0;
  virtual int64_t tokens(int64_t frames) const = 0;  // placeholders a clip of `frames` takes
  virtual Status encode(const float* features, int64_t frames, std::vector<float>* out,
                        ThreadPool& pool) const = 0;
};

}  // namespace qs::models
