// vision: transformers 5.23's Qwen2VLVideoProcessor (Qwen2-VL, Qwen2.5-VL and Qwen2.5-Omni
// use it): which frames of a video are sampled (sample_frames: a target fps or frame count,
// min_frames / max_frames, rounded to temporal_patch_size), then the frames resized by
// smart_resize and torchvision's uint8 bicubic, rescaled and normalised as its torch backend
// does, and cut into patches two frames deep. pixel_values_videos and video_grid_thw come out
// as the processor's do.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "vision/qwen2_vl_image_processor.h"

namespace qs::vision {

// The video processor's settings; the defaults are its class's.
struct Qwen2VLVideoConfig {
  // The fields it shares with the image processor, with the video class's pixel limits:
  // size {shortest_edge: 128 * 28 * 28, longest_edge: 28 * 28 * 768}.
  Qwen2VLImageConfig image = {.min_pixels = 128 * 28 * 28, .max_pixels = 28 * 28 * 768};
  int64_t min_frames = 4;
  int64_t max_frames = 768;
  // The class samples nothing by default (every frame is kept); a processor call with fps or
  // num_frames turns sampling on, as transformers' apply_chat_template does.
  bool do_sample_frames = false;
  std::optional<double> fps;          // target frames per second
  std::optional<int64_t> num_frames;  // or a fixed count (exclusive with fps)
  // qwen-vl-utils' total budget: each frame's max_pixels capped at an even share of
  // max_video_tokens (90% of them), floored at 1.05 * min_pixels. Off unless the config says.
  bool cap_pixels_per_frame = false;
  int64_t max_video_tokens = 128000;
};

// Missing fields keep the defaults above (a "size" lacking one edge keeps that edge's
// default); a field of the wrong type or out of range is an error naming it and `source`.
Result<Qwen2VLVideoConfig> parse_qwen2_vl_video_config(const nlohmann::json& value,
                                                       const std::string& source);
// As transformers finds a checkpoint's video processor: processor_config.json's
// "video_processor", else video_preprocessor_config.json, else preprocessor_config.json (whose
// image fields the video processor takes), else the class defaults.
Result<Qwen2VLVideoConfig> load_qwen2_vl_video_config(const std::string& dir);

// sample_frames: the indices of the frames kept from `total_frames` at `video_fps`. Without
// sampling, every frame. An impossible request (fps and num_frames both set, more frames than
// the video has, a video too short for one temporal patch) is an error saying so.
Result<std::vector<int64_t>> qwen2_vl_sample_frames(int64_t total_frames, double video_fps,
                                                    const Qwen2VLVideoConfig& config);

struct VideoPatches {
  // [n_patches, patch_dim]: patch_dim = 3 * temporal_patch_size * patch_size^2, each row
  // (channel, frame, row, column); rows ordered by time, then 2x2 merge group, then within it.
  std::vector<float> pixel_values;
  int64_t n_patches = 0;
  int64_t patch_dim = 0;
  std::array<int64_t, 3> grid_thw = {0, 0, 0};
  ResizedSize resized;   // each frame's size after smart_resize
  int64_t n_tokens = 0;  // placeholder tokens: patches / merge_size^2
};

// `frames` is [n_frames, height, width, 3] RGB, the sampled frames in order. A frame count
// that is not a multiple of temporal_patch_size is padded with the last frame, as the
// processor's patchify does.
Result<VideoPatches> qwen2_vl_preprocess_video(const std::vector<uint8_t>& frames, int64_t n_frames,
                                               int64_t width, int64_t height,
                                               const Qwen2VLVideoConfig& config);

}  // namespace qs::vision
