// vision: images into a prompt (see image_prompt.h).
#include "vision/image_prompt.h"

#include <filesystem>

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

uint64_t image_source_hash(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a's offset basis and prime
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
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
  out.hash = image_source_hash(bytes);
  out.width = image.width;
  out.height = image.height;
  return out;
}

Result<std::vector<models::MultimodalItem>> expand_image_placeholders(
    std::vector<int32_t>* ids, int32_t image_token_id, std::span<const PromptImage> images) {
  size_t n_placeholders = 0;
  for (const int32_t id : *ids) n_placeholders += id == image_token_id ? 1 : 0;
  if (n_placeholders != images.size()) {
    return invalid_argument("the prompt has " + std::to_string(n_placeholders) +
                            " image placeholder(s) for " + std::to_string(images.size()) +
                            " image(s)");
  }
  std::vector<models::MultimodalItem> items;
  if (images.empty()) return items;
  std::vector<int32_t> out;
  size_t extra = 0;
  for (const PromptImage& image : images) extra += static_cast<size_t>(image.n_tokens);
  out.reserve(ids->size() + extra);
  size_t next = 0;
  for (const int32_t id : *ids) {
    if (id != image_token_id) {
      out.push_back(id);
      continue;
    }
    const PromptImage& image = images[next++];
    models::MultimodalItem item;
    item.offset = static_cast<int64_t>(out.size());
    item.grid = image.grid;
    item.pixels = image.pixels;
    item.hash = image.hash;
    items.push_back(std::move(item));
    out.insert(out.end(), static_cast<size_t>(image.n_tokens), image_token_id);
  }
  *ids = std::move(out);
  return items;
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
