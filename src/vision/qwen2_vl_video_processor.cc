// vision: Qwen2VLVideoProcessor (see qwen2_vl_video_processor.h), after transformers 5.23's
// video_processing_qwen2_vl.py and the torch backend (image_processing_backends.py) it runs on.
#include "vision/qwen2_vl_video_processor.h"

#include <cmath>
#include <filesystem>

#include "core/json.h"
#include "vision/torch_resize.h"

namespace qs::vision {
namespace {

using nlohmann::json;

// Python's round() of a float: halves to even, as nearbyint in the default rounding mode.
int64_t python_round(double x) {
  return static_cast<int64_t>(std::nearbyint(x));
}

}  // namespace

Result<Qwen2VLVideoConfig> parse_qwen2_vl_video_config(const json& value,
                                                       const std::string& source) {
  if (!value.is_object()) {
    return invalid_argument(source + ": expected a JSON object, found " +
                            std::string(value.type_name()));
  }
  Qwen2VLVideoConfig c;
  // The shared fields go through the image parser, the video class's size filled in where
  // the file leaves it out (the image class's defaults differ).
  json shared = value;
  auto size = shared.find("size");
  if (size == shared.end() || size->is_null()) {
    shared["size"] = json::object();
    size = shared.find("size");
  }
  if (size->is_object()) {
    if (!size->contains("shortest_edge")) (*size)["shortest_edge"] = c.image.min_pixels;
    if (!size->contains("longest_edge")) (*size)["longest_edge"] = c.image.max_pixels;
  }
  QS_ASSIGN_OR_RETURN(c.image, parse_qwen2_vl_image_config(shared, source));
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> min_frames,
                      json_integral(value, "min_frames", source));
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> max_frames,
                      json_integral(value, "max_frames", source));
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> num_frames,
                      json_integral(value, "num_frames", source));
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                      json_integral(value, "max_video_tokens", source));
  if (min_frames) c.min_frames = *min_frames;
  if (max_frames) c.max_frames = *max_frames;
  if (max_tokens) c.max_video_tokens = *max_tokens;
  QS_RETURN_IF_ERROR(json_check_range(c.max_frames, 1, 1 << 20, "max_frames", source));
  QS_RETURN_IF_ERROR(json_check_range(c.min_frames, 1, c.max_frames, "min_frames", source));
  QS_RETURN_IF_ERROR(
      json_check_range(c.max_video_tokens, 1, int64_t{1} << 30, "max_video_tokens", source));
  if (num_frames) {
    QS_RETURN_IF_ERROR(json_check_range(*num_frames, 1, 1 << 20, "num_frames", source));
    c.num_frames = *num_frames;
  }
  if (auto it = value.find("fps"); it != value.end() && !it->is_null()) {
    if (!it->is_number() || !std::isfinite(it->get<double>()) || !(it->get<double>() > 0.0)) {
      return invalid_argument(source + ": 'fps' must be a positive number, found " + it->dump());
    }
    c.fps = it->get<double>();
  }
  QS_RETURN_IF_ERROR(processor_config_bool(value, "do_sample_frames", source, &c.do_sample_frames));
  QS_RETURN_IF_ERROR(
      processor_config_bool(value, "cap_pixels_per_frame", source, &c.cap_pixels_per_frame));
  return c;
}

Result<Qwen2VLVideoConfig> load_qwen2_vl_video_config(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path processor = fs::path(dir) / "processor_config.json";
  if (fs::exists(processor, ec)) {
    QS_ASSIGN_OR_RETURN(json value, read_json(processor.string()));
    if (value.is_object() && value.contains("video_processor")) {
      return parse_qwen2_vl_video_config(value["video_processor"],
                                         processor.string() + ": video_processor");
    }
  }
  for (const char* file : {"video_preprocessor_config.json", "preprocessor_config.json"}) {
    const fs::path path = fs::path(dir) / file;
    if (!fs::exists(path, ec)) continue;
    QS_ASSIGN_OR_RETURN(json value, read_json(path.string()));
    return parse_qwen2_vl_video_config(value, path.string());
  }
  return Qwen2VLVideoConfig{};
}

Result<std::vector<int64_t>> qwen2_vl_sample_frames(int64_t total_frames, double video_fps,
                                                    const Qwen2VLVideoConfig& config) {
  if (total_frames <= 0) {
    return invalid_argument("the video has " + std::to_string(total_frames) + " frames");
  }
  std::vector<int64_t> indices;
  if (!config.do_sample_frames || (!config.fps && !config.num_frames)) {
    indices.resize(static_cast<size_t>(total_frames));
    for (int64_t i = 0; i < total_frames; ++i) indices[static_cast<size_t>(i)] = i;
    return indices;
  }
  if (config.fps && config.num_frames) {
    return invalid_argument("fps and num_frames are exclusive: ask for one of them");
  }
  const int64_t tps = config.image.temporal_patch_size;
  int64_t n = 0;
  if (config.num_frames) {
    n = python_round(static_cast<double>(*config.num_frames) / static_cast<double>(tps)) * tps;
  } else {
    if (!(video_fps > 0) || !std::isfinite(video_fps)) {
      return invalid_argument("sampling at " + std::to_string(*config.fps) +
                              " fps needs the video's frame rate, which is unknown");
    }
    // As sample_frames: the ceiling first rounded down to whole temporal patches, the
    // target clamped to [min_frames, that ceiling] and to the video, then rounded down.
    const int64_t ceiling = std::min(config.max_frames, total_frames) / tps * tps;
    double want = static_cast<double>(total_frames) / video_fps * *config.fps;
    want = std::max(want, static_cast<double>(config.min_frames));
    want = std::min({want, static_cast<double>(ceiling), static_cast<double>(total_frames)});
    n = static_cast<int64_t>(std::floor(want / static_cast<double>(tps))) * tps;
  }
  if (n > total_frames) {
    return invalid_argument("cannot sample " + std::to_string(n) + " frames from a video of " +
                            std::to_string(total_frames));
  }
  if (n <= 0) {
    return invalid_argument("a video of " + std::to_string(total_frames) +
                            " frame(s) is too short to sample: one temporal patch takes " +
                            std::to_string(tps) + " frames");
  }
  // torch.arange(0, total, total / n).int(): the count is ceil(total / step) in double, each
  // value i * step rounded to float32 (arange's default dtype), then truncated.
  const double step = static_cast<double>(total_frames) / static_cast<double>(n);
  const auto count = static_cast<int64_t>(std::ceil(static_cast<double>(total_frames) / step));
  indices.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    indices[static_cast<size_t>(i)] =
        static_cast<int64_t>(static_cast<float>(static_cast<double>(i) * step));
  }
  return indices;
}

Result<VideoPatches> qwen2_vl_preprocess_video(const std::vector<uint8_t>& frames, int64_t n_frames,
                                               int64_t width, int64_t height,
                                               const Qwen2VLVideoConfig& config) {
  const Qwen2VLImageConfig& ic = config.image;
  const int64_t patch = ic.patch_size, merge = ic.merge_size, tps = ic.temporal_patch_size;
  if (n_frames <= 0 || width <= 0 || height <= 0 ||
      static_cast<int64_t>(frames.size()) / n_frames / height / 3 != width ||
      static_cast<int64_t>(frames.size()) != n_frames * height * width * 3) {
    return invalid_argument("qwen2_vl_preprocess_video: the pixels do not fill " +
                            std::to_string(n_frames) + " RGB frames of " + std::to_string(width) +
                            "x" + std::to_string(height));
  }
  const int64_t factor = patch * merge;
  VideoPatches out;
  out.resized = {height, width};
  if (ic.do_resize) {
    int64_t max_pixels = ic.max_pixels;
    if (config.cap_pixels_per_frame) {
      // int(max_video_tokens * factor^2 * 0.9) pixels shared by the frames, temporal_factor
      // frames to a patch; never below 1.05 * shortest_edge.
      const auto total_pixels = static_cast<int64_t>(
          static_cast<double>(config.max_video_tokens * factor * factor) * 0.9);
      max_pixels = std::max(std::min(max_pixels, total_pixels * tps / n_frames),
                            static_cast<int64_t>(static_cast<double>(ic.min_pixels) * 1.05));
    }
    QS_ASSIGN_OR_RETURN(out.resized,
                        smart_resize(height, width, factor, ic.min_pixels, max_pixels));
  }
  const int64_t rh = out.resized.height, rw = out.resized.width;
  if (rh % factor != 0 || rw % factor != 0) {
    return invalid_argument("qwen2_vl_preprocess_video: " + std::to_string(rw) + "x" +
                            std::to_string(rh) + " frames do not split into " +
                            std::to_string(factor) + "-pixel merge groups (do_resize off)");
  }
  const int64_t grid_t = (n_frames + tps - 1) / tps, grid_h = rh / patch, grid_w = rw / patch;
  const size_t in_bytes = static_cast<size_t>(width * height * 3);
  std::vector<std::vector<uint8_t>> resized(static_cast<size_t>(n_frames));
  for (int64_t f = 0; f < n_frames; ++f) {
    std::vector<uint8_t> frame(frames.begin() + f * in_bytes, frames.begin() + (f + 1) * in_bytes);
    resized[f] = (rh == height && rw == width)
                     ? std::move(frame)
                     : torch_resize_bicubic(frame, width, height, 3, rw, rh);
  }
  // rescale_and_normalize fused as the torch backend does: mean and std (float32 tensors)
  // times 1 / rescale_factor (a float32 product), then (x - mean) / std in float32.
  std::array<std::array<float, 256>, 3> lut{};
  for (int c = 0; c < 3; ++c) {
    float mean = static_cast<float>(ic.image_mean[c]);
    float std_dev = static_cast<float>(ic.image_std[c]);
    if (ic.do_rescale && ic.do_normalize) {
      const auto inv = static_cast<float>(1.0 / ic.rescale_factor);
      mean = mean * inv;
      std_dev = std_dev * inv;
    }
    for (int u = 0; u < 256; ++u) {
      auto x = static_cast<float>(u);
      if (ic.do_normalize) {
        x = (x - mean) / std_dev;
      } else if (ic.do_rescale) {
        x = x * static_cast<float>(ic.rescale_factor);
      }
      lut[c][u] = x;
    }
  }
  out.grid_thw = {grid_t, grid_h, grid_w};
  out.n_patches = grid_t * grid_h * grid_w;
  out.patch_dim = 3 * tps * patch * patch;
  out.n_tokens = out.n_patches / (merge * merge);
  out.pixel_values.resize(static_cast<size_t>(out.n_patches * out.patch_dim));
  // patchify's permute to (time, block row, block column, row in block, column in block,
  // channel, frame in patch, patch row, patch column).
  float* dst = out.pixel_values.data();
  for (int64_t t = 0; t < grid_t; ++t) {
    for (int64_t bh = 0; bh < grid_h / merge; ++bh) {
      for (int64_t bw = 0; bw < grid_w / merge; ++bw) {
        for (int64_t mh = 0; mh < merge; ++mh) {
          for (int64_t mw = 0; mw < merge; ++mw) {
            const int64_t y0 = (bh * merge + mh) * patch, x0 = (bw * merge + mw) * patch;
            for (int c = 0; c < 3; ++c) {
              for (int64_t k = 0; k < tps; ++k) {
                // Past the last frame, the last again: patchify's padding to whole patches.
                const int64_t f = std::min(t * tps + k, n_frames - 1);
                const uint8_t* img = resized[static_cast<size_t>(f)].data();
                for (int64_t py = 0; py < patch; ++py) {
                  const uint8_t* row = img + ((y0 + py) * rw + x0) * 3 + c;
                  for (int64_t px = 0; px < patch; ++px) *dst++ = lut[c][row[px * 3]];
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace qs::vision
