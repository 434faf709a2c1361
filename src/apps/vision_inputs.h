// apps: what `serve` and `generate` load beside a vision-language checkpoint's decoder: the
// vision tower the engine runs (EngineConfig::vision) and the image placeholders and processor
// that prompts are built with; and serve's --limit-mm-per-prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "models/model_config.h"
#include "vision/image_prompt.h"
#include "vision/qwen2_5_vl_vision.h"

namespace qs::apps {

struct VisionInputs {
  std::unique_ptr<vision::Qwen25VisionTower> tower;  // null: a text-only model
  std::unique_ptr<vision::ImagePromptConfig> images;
};

// A config.json that names an image_token_id (Qwen2.5-VL) loads both; any other model neither.
Result<VisionInputs> load_vision_inputs(const std::string& dir, const models::ModelConfig& config);

// vLLM's --limit-mm-per-prompt: a JSON object of modality -> count ('{"image": 4}'); returns the
// image count, `fallback` when the object leaves it out. Videos and audio are not read yet, so
// their counts are accepted and unused.
Result<int64_t> image_limit_from_flag(const std::string& text, int64_t fallback);

}  // namespace qs::apps
