// models: what a multimodal prompt carries besides its token ids, and the one interface the
// engine calls to encode it. An image or a video is a run of placeholder tokens in the prompt
// (each the model's image or video token id), the patches its vision tower reads, and a hash
// of its source bytes; the engine encodes the items of a request once, scatters the embeddings
// into the placeholder rows of each prefill chunk (ForwardBatch::embeddings), gives M-RoPE
// models the items' 3-D positions (mrope.h), and mixes the hashes into the prefix cache's
// block keys so that a cached block is shared only by prompts with the same images.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/mrope.h"

namespace qs::models {

struct MultimodalItem {
  bool video = false;
  bool audio = false;  // a sound clip (its log-mel frames in `features`), not an image
  int64_t offset = 0;  // the first of its placeholders in the prompt
  VisionGrid grid;     // images, videos: patches along time, height, width (before merging)
  std::shared_ptr<const std::vector<float>> pixels;    // [grid.t * h * w, patch values]
  int64_t frames = 0;                                  // audio: log-mel frames
  std::shared_ptr<const std::vector<float>> features;  // audio: [n_mels, frames]
  uint64_t hash = 0;                                   // of the source bytes (0: not cacheable)
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
