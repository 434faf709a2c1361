// vision: transformers' Qwen2VLImageProcessor (the PIL one; Qwen2-VL, Qwen2.5-VL and
// Qwen2.5-Omni use it): an RGB image resized by smart_resize and Pillow's bicubic, rescaled,
// normalized and cut into the vision tower's patches, the image repeated into
// temporal_patch_size frames. pixel_values and image_grid_thw come out as the processor's do.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "vision/image_file.h"

namespace qs::vision {

// preprocessor_config.json's image fields; the defaults are the processor class's.
struct Qwen2VLImageConfig {
  int64_t min_pixels = 56 * 56;         // "min_pixels", else "size"."shortest_edge"
  int64_t max_pixels = 28 * 28 * 1280;  // "max_pixels", else "size"."longest_edge"
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;
  double rescale_factor = 1.0 / 255.0;
  // OpenAI CLIP's, transformers' OPENAI_CLIP_MEAN / OPENAI_CLIP_STD.
  std::array<double, 3> image_mean = {0.48145466, 0.4578275, 0.40821073};
  std::array<double, 3> image_std = {0.26862954, 0.26130258, 0.27577711};
};

// Missing fields keep the defaults above; a field of the wrong type or out of range, or a
// resample other than bicubic (3), is an error naming it. `source` names the file.
Result<Qwen2VLImageConfig> parse_qwen2_vl_image_config(const nlohmann::json& value,
                                                       const std::string& source);
// `dir`/preprocessor_config.json; its absence is an error.
Result<Qwen2VLImageConfig> load_qwen2_vl_image_config(const std::string& dir);

// A processor config's boolean field (do_resize, do_sample_frames, ...) into *out when present
// and not null; another type is an error naming `source` and the field. Shared with the video
// processor.
Status processor_config_bool(const nlohmann::json& obj, const char* field,
                             const std::string& source, bool* out);

struct ResizedSize {
  int64_t height = 0;
  int64_t width = 0;
};

// transformers' smart_resize: both sides multiples of `factor`, the area within
// [min_pixels, max_pixels], the aspect ratio kept as nearly as that allows. An aspect ratio
// past 200 is an error, as there.
Result<ResizedSize> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                 int64_t max_pixels);

struct ImagePatches {
  // [n_patches, patch_dim]: patch_dim = 3 * temporal_patch_size * patch_size^2, each row
  // (channel, frame, row, column); rows ordered by 2x2 merge group, then within the group.
  std::vector<float> pixel_values;
  int64_t n_patches = 0;
  int64_t patch_dim = 0;
  std::array<int64_t, 3> grid_thw = {0, 0, 0};  // (1, height / patch, width / patch)
  ResizedSize resized;                          // the image's size after smart_resize
  // The placeholder tokens the image takes in the prompt: patches / merge_size^2.
  int64_t n_tokens = 0;
};

Result<ImagePatches> qwen2_vl_preprocess(const RgbImage& image, const Qwen2VLImageConfig& config);

}  // namespace qs::vision
