// apps: a vision-language checkpoint's tower and image inputs (see vision_inputs.h).
#include "apps/vision_inputs.h"

#include <nlohmann/json.hpp>

namespace qs::apps {

Result<VisionInputs> load_vision_inputs(const std::string& dir, const models::ModelConfig& config) {
  VisionInputs out;
  if (config.image_token_id < 0) return out;
  QS_ASSIGN_OR_RETURN(vision::Qwen25VisionTower tower, vision::Qwen25VisionTower::load(dir));
  QS_ASSIGN_OR_RETURN(vision::ImagePromptConfig images,
                      vision::load_image_prompt_config(dir, config));
  out.tower = std::make_unique<vision::Qwen25VisionTower>(std::move(tower));
  out.images = std::make_unique<vision::ImagePromptConfig>(std::move(images));
  return out;
}

Result<int64_t> image_limit_from_flag(const std::string& text, int64_t fallback) {
  const auto bad = [&](const std::string& why) {
    return invalid_argument(
        "--limit-mm-per-prompt expects a JSON object such as '{\"image\": 4}' (" + why +
        "), got '" + text + "'");
  };
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("not a JSON object");
  int64_t limit = fallback;
  for (const auto& [key, value] : j.items()) {
    if (key != "image" && key != "video" && key != "audio") return bad("unknown modality " + key);
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 1000000) {
      return bad("counts are integers from 0 to 1000000");
    }
    if (key == "image") limit = value.get<int64_t>();
  }
  return limit;
}

}  // namespace qs::apps
