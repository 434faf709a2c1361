// models: the 3-D positions of a multimodal prompt under M-RoPE, as transformers'
// Qwen2_5_VLModel.get_rope_index computes them: text tokens count up on all three axes; the
// k = t * (h / m) * (w / m) placeholder tokens of an image or video take (temporal, row,
// column) positions from where the text stopped, the temporal one spaced by tokens_per_second
// x seconds per temporal patch for a video; the text after it resumes at the start plus
// max(h, w) / m. The prompt's delta (largest position + 1 - length) is what decode adds to
// the cache length on every axis.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "models/model_config.h"

namespace qs::models {

// One image or video of a prompt as its vision tower sees it: patches along time, height and
// width (before the spatial merge), and, for a video, the seconds one temporal patch spans.
struct VisionGrid {
  int64_t t = 1, h = 0, w = 0;
  double seconds_per_t = 1.0;  // videos only
  int64_t tokens(int64_t merge) const { return t * (h / merge) * (w / merge); }
};

struct MropePositions {
  std::vector<int32_t> positions;  // axis-major [3 * ids.size()]
  int32_t delta = 0;
};

// The runs of `config.image_token_id` / `video_token_id` in `ids` take the grids of `images`
// / `videos` in order. Fails when the runs and the grids disagree (count or length).
Result<MropePositions> mrope_positions(std::span<const int32_t> ids, const ModelConfig& config,
                                       std::span<const VisionGrid> images,
                                       std::span<const VisionGrid> videos);

}  // namespace qs::models
