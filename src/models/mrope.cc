// models: M-RoPE positions of a multimodal prompt (see mrope.h).
#include "models/mrope.h"

#include <algorithm>
#include <string>

namespace qs::models {

Result<MropePositions> mrope_positions(std::span<const int32_t> ids, const ModelConfig& config,
                                       std::span<const VisionGrid> images,
                                       std::span<const VisionGrid> videos) {
  const int64_t n = static_cast<int64_t>(ids.size()), m = config.vision_merge_size;
  if (config.mrope_section.empty() || m < 1) {
    return invalid_argument("3-D positions asked of a model without M-RoPE");
  }
  MropePositions out;
  out.positions.assign(static_cast<size_t>(3 * n), 0);
  auto kind = [&](int32_t id) {
    return id == config.image_token_id ? 1 : id == config.video_token_id ? 2 : 0;
  };
  size_t next_image = 0, next_video = 0;
  int64_t pos = 0, largest = -1;
  for (int64_t i = 0; i < n;) {
    const int k = kind(ids[i]);
    int64_t end = i + 1;
    while (end < n && kind(ids[end]) == k) ++end;
    if (k == 0) {
      for (int64_t j = i; j < end; ++j, ++pos) {
        for (int a = 0; a < 3; ++a) out.positions[a * n + j] = static_cast<int32_t>(pos);
      }
      largest = std::max(largest, pos - 1);
      i = end;
      continue;
    }
    std::span<const VisionGrid> grids = k == 1 ? images : videos;
    size_t& next = k == 1 ? next_image : next_video;
    const char* what = k == 1 ? "image" : "video";
    if (next >= grids.size()) {
      return invalid_argument(std::string("the prompt has more ") + what + " placeholders than " +
                              what + "s");
    }
    const VisionGrid& g = grids[next++];
    const int64_t gh = g.h / m, gw = g.w / m;
    if (g.t < 1 || gh < 1 || gw < 1 || g.h % m != 0 || g.w % m != 0) {
      return invalid_argument(std::string("an ") + what + " grid not divisible by the merge size");
    }
    if (end - i != g.tokens(m)) {
      return invalid_argument(std::string("an ") + what + " run of " + std::to_string(end - i) +
                              " placeholders for " + std::to_string(g.tokens(m)) + " tokens");
    }
    // Still images have no time to space out; a video's temporal patches are
    // tokens_per_second x seconds apart, truncated as transformers' .long() does.
    const double interval = k == 2 ? config.vision_tokens_per_second * g.seconds_per_t : 1.0;
    int64_t j = i;
    for (int64_t t = 0; t < g.t; ++t) {
      const int64_t pt = pos + static_cast<int64_t>(static_cast<double>(t) * interval);
      for (int64_t y = 0; y < gh; ++y) {
        for (int64_t x = 0; x < gw; ++x, ++j) {
          out.positions[0 * n + j] = static_cast<int32_t>(pt);
          out.positions[1 * n + j] = static_cast<int32_t>(pos + y);
          out.positions[2 * n + j] = static_cast<int32_t>(pos + x);
          largest = std::max({largest, pt, pos + y, pos + x});
        }
      }
    }
    pos += std::max(g.h, g.w) / m;
    i = end;
  }
  if (next_image != images.size() || next_video != videos.size()) {
    return invalid_argument("the prompt has fewer image or video placeholders than items");
  }
  out.delta = static_cast<int32_t>(largest + 1 - n);
  return out;
}

}  // namespace qs::models
