// vision: images into a prompt (see image_prompt.h).
#include "vision/image_prompt.h"

#include <filesystem>

#include "core/content_hash.h"

namespace qs::vision {

Result<ImagePromptConfig> load_image_prompt_config(const std::string& dir,
                                                   const models::ModelConfig& config) {
  if (config.image_token_id < 0) {
    return invalid_argument(dir + ": config.json names no image_token_id (not a vision model)");
  }
  ImagePromptConfig out;
  out.image_token_id = config.image_token_id;
  out.vision_start_token_id = config.vision_start_token_id;
  out.vision_end_token_id = config.vision_end_token_id;
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(dir) / "preprocessor_config.json", ec)) {
    QS_ASSIGN_OR_RETURN(out.processor, load_qwen2_vl_image_config(dir));
  }
  return out;
}

Result<PromptImage> prepare_prompt_image(std::string_view bytes, const std::string& name,
                                         const Qwen2VLImageConfig& config,
                                         const ImageReadOptions& options) {
  QS_ASSIGN_OR_RETURN(RgbImage image, read_image_bytes(bytes, name, options));
  Result<ImagePatches> patches = qwen2_vl_preprocess(image, config);
  if (!patches.ok()) return patches.status().with_context(name);
  PromptImage out;
  out.grid = {patches->grid_thw[0], patches->grid_thw[1], patches->grid_thw[2]};
  out.n_tokens = patches->n_tokens;
  out.pixels = std::make_shared<const std::vector<float>>(std::move(patches->pixel_values));
  out.hash = content_hash(bytes);
  out.width = image.width;
  out.height = image.height;
  return out;
}

models::PlaceholderItem image_placeholder(const PromptImage& image,
                                          const ImagePromptConfig& config) {
  models::PlaceholderItem p;
  p.token_id = config.image_token_id;
  p.n_tokens = image.n_tokens;
  p.item.grid = image.grid;
  p.item.pixels = image.pixels;
  p.item.hash = image.hash;
  return p;
}

}  // namespace qs::vision
