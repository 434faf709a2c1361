// vision: images into a prompt for Qwen2-VL-family decoders, shared by the server's chat
// endpoint and `generate --image`. An image's bytes become its patches, grid and placeholder
// count (the checkpoint's preprocessor_config.json); models::expand_placeholders then widens each
// placeholder token the chat template wrote into grid.t * h * w / merge^2 copies, as
// transformers' Qwen2_5_VLProcessor does. The hash is core/content_hash.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "models/model_config.h"
#include "models/multimodal.h"
#include "models/placeholders.h"
#include "vision/image_file.h"
#include "vision/qwen2_vl_image_processor.h"

namespace qs::vision {

// What a checkpoint says about its image inputs.
struct ImagePromptConfig {
  int32_t image_token_id = -1;         // <|image_pad|>: one per image before expansion
  int32_t vision_start_token_id = -1;  // <|vision_start|>
  int32_t vision_end_token_id = -1;    // <|vision_end|>
  Qwen2VLImageConfig processor;
};

// The ids from the model's config.json and the processor from preprocessor_config.json (the
// class defaults when the file is absent, as transformers falls back to them).
Result<ImagePromptConfig> load_image_prompt_config(const std::string& dir,
                                                   const models::ModelConfig& config);

// One image, processed and ready to go into a prompt.
struct PromptImage {
  models::VisionGrid grid;                           // patches along t, h, w
  std::shared_ptr<const std::vector<float>> pixels;  // [t * h * w, patch values]
  int64_t n_tokens = 0;                              // placeholders after expansion
  uint64_t hash = 0;                                 // of the source bytes, never 0
  int64_t width = 0, height = 0;                     // as decoded
};

// Decodes `bytes` (JPEG, PNG or WebP; `name` names it in errors) and runs the processor. An
// image past options.max_pixels is refused from its header; sizes the processor refuses (an
// aspect ratio past 200) are errors naming the image.
Result<PromptImage> prepare_prompt_image(std::string_view bytes, const std::string& name,
                                         const Qwen2VLImageConfig& config,
                                         const ImageReadOptions& options = {});

// The image as an item waiting for its placeholder (models::expand_placeholders).
models::PlaceholderItem image_placeholder(const PromptImage& image,
                                          const ImagePromptConfig& config);

}  // namespace qs::vision
