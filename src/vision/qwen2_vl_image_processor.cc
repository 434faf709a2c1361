// vision: Qwen2VLImageProcessor (see qwen2_vl_image_processor.h), after transformers 5.23's
// image_processing_pil_qwen2_vl.py and the numpy transforms its PIL backend calls.
#include "vision/qwen2_vl_image_processor.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "core/json.h"
#include "vision/pil_resize.h"

namespace qs::vision {
namespace {

using nlohmann::json;

// Far above Qwen2.5-VL's 12,845,056 (16384 merged tokens); below sizes whose pixel_values
// (24 bytes per pixel at two frames) no machine holds.
constexpr int64_t kMaxProcessorPixels = int64_t{1} << 27;

// image_mean / image_std: three numbers, or one for every channel (transformers' normalize
// repeats a scalar).
Status vl_config_triple(const json& obj, const char* field, const std::string& source,
                        bool positive, std::array<double, 3>* out) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return ok_status();
  std::array<double, 3> v{};
  if (it->is_number()) {
    v.fill(it->get<double>());
  } else if (it->is_array() && it->size() == 3 && (*it)[0].is_number() && (*it)[1].is_number() &&
             (*it)[2].is_number()) {
    for (int c = 0; c < 3; ++c) v[c] = (*it)[c].get<double>();
  } else {
    return invalid_argument(source + ": '" + field + "' must be 3 numbers (R, G, B), found " +
                            it->dump());
  }
  for (double x : v) {
    if (!std::isfinite(x) || (positive && !(x > 0.0))) {
      return invalid_argument(source + ": '" + field + "' must hold finite" +
                              (positive ? " positive" : "") + " numbers, found " + it->dump());
    }
  }
  *out = v;
  return ok_status();
}

}  // namespace

Status processor_config_bool(const nlohmann::json& obj, const char* field,
                             const std::string& source, bool* out) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return ok_status();
  if (!it->is_boolean()) {
    return invalid_argument(source + ": '" + field + "' must be true or false, found " +
                            it->dump());
  }
  *out = it->get<bool>();
  return ok_status();
}

Result<Qwen2VLImageConfig> parse_qwen2_vl_image_config(const json& value,
                                                       const std::string& source) {
  if (!value.is_object()) {
    return invalid_argument(source + ": expected a JSON object, found " +
                            std::string(value.type_name()));
  }
  Qwen2VLImageConfig c;
  // "size" first; "min_pixels" / "max_pixels" override it, as the processor's __init__ does.
  if (auto size = value.find("size"); size != value.end() && !size->is_null()) {
    if (!size->is_object()) {
      return invalid_argument(source + ": 'size' must be an object, found " + size->dump());
    }
    QS_ASSIGN_OR_RETURN(auto shortest, json_integral(*size, "shortest_edge", source + ": size"));
    QS_ASSIGN_OR_RETURN(auto longest, json_integral(*size, "longest_edge", source + ": size"));
    if (shortest) c.min_pixels = *shortest;
    if (longest) c.max_pixels = *longest;
  }
  const std::pair<const char*, int64_t*> ints[] = {{"min_pixels", &c.min_pixels},
                                                   {"max_pixels", &c.max_pixels},
                                                   {"patch_size", &c.patch_size},
                                                   {"temporal_patch_size", &c.temporal_patch_size},
                                                   {"merge_size", &c.merge_size}};
  for (const auto& [field, out] : ints) {
    QS_ASSIGN_OR_RETURN(std::optional<int64_t> v, json_integral(value, field, source));
    if (v) *out = *v;
  }
  QS_RETURN_IF_ERROR(json_check_range(c.patch_size, 1, 1024, "patch_size", source));
  QS_RETURN_IF_ERROR(json_check_range(c.temporal_patch_size, 1, 64, "temporal_patch_size", source));
  QS_RETURN_IF_ERROR(json_check_range(c.merge_size, 1, 64, "merge_size", source));
  QS_RETURN_IF_ERROR(
      json_check_range(c.max_pixels, 1, kMaxProcessorPixels, "max_pixels (longest_edge)", source));
  QS_RETURN_IF_ERROR(
      json_check_range(c.min_pixels, 1, c.max_pixels, "min_pixels (shortest_edge)", source));
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> resample, json_integral(value, "resample", source));
  if (resample && *resample != 3) {
    return unimplemented(source + ": 'resample' is " + std::to_string(*resample) +
                         "; only bicubic (3), the processor's, is implemented");
  }
  QS_RETURN_IF_ERROR(processor_config_bool(value, "do_resize", source, &c.do_resize));
  QS_RETURN_IF_ERROR(processor_config_bool(value, "do_rescale", source, &c.do_rescale));
  QS_RETURN_IF_ERROR(processor_config_bool(value, "do_normalize", source, &c.do_normalize));
  if (auto it = value.find("rescale_factor"); it != value.end() && !it->is_null()) {
    if (!it->is_number() || !std::isfinite(it->get<double>()) || !(it->get<double>() > 0.0)) {
      return invalid_argument(source + ": 'rescale_factor' must be a positive number, found " +
                              it->dump());
    }
    c.rescale_factor = it->get<double>();
  }
  QS_RETURN_IF_ERROR(vl_config_triple(value, "image_mean", source, false, &c.image_mean));
  QS_RETURN_IF_ERROR(vl_config_triple(value, "image_std", source, true, &c.image_std));
  return c;
}

Result<Qwen2VLImageConfig> load_qwen2_vl_image_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "preprocessor_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return not_found(path + ": missing (the image processor's settings)");
  }
  QS_ASSIGN_OR_RETURN(json value, read_json(path));
  return parse_qwen2_vl_image_config(value, path);
}

Result<ResizedSize> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                 int64_t max_pixels) {
  if (height <= 0 || width <= 0 || factor <= 0) {
    return invalid_argument("smart_resize: an image of " + std::to_string(width) + "x" +
                            std::to_string(height) + " pixels");
  }
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  const double ratio = std::max(h, w) / std::min(h, w);
  if (ratio > 200) {
    return invalid_argument("the image is " + std::to_string(width) + "x" + std::to_string(height) +
                            ": its aspect ratio " + std::to_string(ratio) +
                            " is past 200, the processor's limit");
  }
  const double f = static_cast<double>(factor);
  // Python's round() rounds halves to even, as nearbyint does in the default rounding mode.
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt((h * w) / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return ResizedSize{h_bar, w_bar};
}

Result<ImagePatches> qwen2_vl_preprocess(const RgbImage& image, const Qwen2VLImageConfig& config) {
  const int64_t patch = config.patch_size, merge = config.merge_size;
  const int64_t frames = config.temporal_patch_size;
  if (image.width <= 0 || image.height <= 0 ||
      static_cast<int64_t>(image.pixels.size()) != image.width * image.height * 3) {
    return invalid_argument("qwen2_vl_preprocess: the pixels do not fill a " +
                            std::to_string(image.width) + "x" + std::to_string(image.height) +
                            " RGB image");
  }
  ImagePatches out;
  std::vector<uint8_t> resized_pixels;
  const std::vector<uint8_t>* pixels = &image.pixels;
  out.resized = {image.height, image.width};
  if (config.do_resize) {
    QS_ASSIGN_OR_RETURN(out.resized, smart_resize(image.height, image.width, patch * merge,
                                                  config.min_pixels, config.max_pixels));
    resized_pixels = pil_resize_bicubic(image.pixels, image.width, image.height, 3,
                                        out.resized.width, out.resized.height);
    pixels = &resized_pixels;
  }
  const int64_t height = out.resized.height, width = out.resized.width;
  if (height % (patch * merge) != 0 || width % (patch * merge) != 0) {
    return invalid_argument("qwen2_vl_preprocess: a " + std::to_string(width) + "x" +
                            std::to_string(height) + " image does not split into " +
                            std::to_string(patch * merge) + "-pixel merge groups (do_resize off)");
  }
  // Each channel's 256 possible values: rescale in f64 then cast to f32 (transformers'
  // rescale), then (x - mean) / std in f32 (its normalize, with mean and std cast to f32).
  std::array<std::array<float, 256>, 3> lut{};
  for (int c = 0; c < 3; ++c) {
    const float mean = static_cast<float>(config.image_mean[c]);
    const float std_dev = static_cast<float>(config.image_std[c]);
    for (int u = 0; u < 256; ++u) {
      float x =
          config.do_rescale ? static_cast<float>(u * config.rescale_factor) : static_cast<float>(u);
      if (config.do_normalize) x = (x - mean) / std_dev;
      lut[c][u] = x;
    }
  }
  const int64_t grid_h = height / patch, grid_w = width / patch;
  out.grid_thw = {1, grid_h, grid_w};
  out.n_patches = grid_h * grid_w;
  out.patch_dim = 3 * frames * patch * patch;
  out.n_tokens = out.n_patches / (merge * merge);
  out.pixel_values.resize(out.n_patches * out.patch_dim);
  // The processor's transpose to (block row, block column, row in block, column in block,
  // channel, frame, patch row, patch column); every frame is the same image.
  float* dst = out.pixel_values.data();
  for (int64_t bh = 0; bh < grid_h / merge; ++bh) {
    for (int64_t bw = 0; bw < grid_w / merge; ++bw) {
      for (int64_t mh = 0; mh < merge; ++mh) {
        for (int64_t mw = 0; mw < merge; ++mw) {
          const int64_t y0 = (bh * merge + mh) * patch, x0 = (bw * merge + mw) * patch;
          for (int c = 0; c < 3; ++c) {
            for (int64_t t = 0; t < frames; ++t) {
              for (int64_t py = 0; py < patch; ++py) {
                const uint8_t* row = pixels->data() + ((y0 + py) * width + x0) * 3 + c;
                for (int64_t px = 0; px < patch; ++px) *dst++ = lut[c][row[px * 3]];
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
