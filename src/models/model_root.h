// models: where the model sits in a checkpoint that holds more than it. A full Qwen2.5-Omni
// (config.json architectures Qwen2_5OmniModel, as the hub's Qwen/Qwen2.5-Omni-7B, or
// Qwen2_5OmniForConditionalGeneration, as transformers 5 saves it; model_type qwen2_5_omni)
// keeps its thinker's config under thinker_config and its tensors under "thinker.", beside a
// talker (talker_config, talker.*) and token2wav (token2wav_config, token2wav.*) that turn
// the thinker's output into speech and that quantserve does not run. Every other checkpoint
// is the model itself.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "models/model_config.h"

namespace qs::models {

struct ModelRoot {
  const nlohmann::json* config = nullptr;  // the model's own config object, inside `top`
  std::string tensor_prefix;               // "thinker."; "" when the checkpoint is the model
  std::string container_architecture;      // "Qwen2_5OmniModel"; "" likewise
  std::vector<SkippedPart> skipped_parts;  // the parts the config names beside the model
};

// The model inside the parsed config.json `top`. A full Omni config without a thinker_config
// object is an error naming the file's architecture.
Result<ModelRoot> find_model_root(const nlohmann::json& top);

}  // namespace qs::models
