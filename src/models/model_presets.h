// models: config.json bodies of well-known open models, so that `make-model --like NAME` writes
// random-weight checkpoints at their real shapes (values copied from the models' published
// config.json files; only shape-relevant fields are kept).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::models {

// The config.json of preset `name` (e.g. "qwen2.5-0.5b"); error lists the known names.
Result<nlohmann::json> model_preset(const std::string& name);
// The preprocessor_config.json of a multimodal preset (the image processor, and the audio
// feature extractor of Omni); JSON null for a text model.
Result<nlohmann::json> model_preset_preprocessor(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace qs::models
