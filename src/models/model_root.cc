// models: the model inside a container checkpoint (see model_root.h).
#include "models/model_root.h"

namespace qs::models {

namespace {

// The architecture a full Omni config names (architectures[0]), or "" for any other config.
std::string omni_container(const nlohmann::json& top) {
  const auto arch = top.find("architectures");
  if (arch != top.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string()) {
    const std::string name = (*arch)[0].get<std::string>();
    if (name == "Qwen2_5OmniModel" || name == "Qwen2_5OmniForConditionalGeneration") return name;
  }
  // A config saved without architectures still says what it is.
  const auto type = top.find("model_type");
  if (type != top.end() && *type == "qwen2_5_omni") return "Qwen2_5OmniForConditionalGeneration";
  return "";
}

}  // namespace

Result<ModelRoot> find_model_root(const nlohmann::json& top) {
  ModelRoot root;
  root.config = &top;
  if (!top.is_object()) return root;
  root.container_architecture = omni_container(top);
  if (root.container_architecture.empty()) return root;
  const auto thinker = top.find("thinker_config");
  if (thinker == top.end() || !thinker->is_object()) {
    return invalid_argument("a full Qwen2.5-Omni config (" + root.container_architecture +
                            ") needs its thinker_config object");
  }
  root.config = &*thinker;
  root.tensor_prefix = "thinker.";
  for (const char* part : {"talker", "token2wav"}) {
    const auto it = top.find(std::string(part) + "_config");
    if (it != top.end() && it->is_object()) {
      root.skipped_parts.push_back({part, std::string(part) + ".", 0, 0});
    }
  }
  return root;
}

}  // namespace qs::models
