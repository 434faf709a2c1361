// models (internal): the table of model families. Each family file (llama.cc, qwen2.cc,
// qwen3.cc, moe_families.cc) reads the config.json fields only it has and sets the ModelConfig
// flags that the shared blocks and the tensor list act on; the common fields are read by
// model_config.cc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "models/model_config.h"

namespace qs::models {

struct FamilyDef {
  const char* architecture;  // config.json "architectures"[0]
  Family family;
  // Called after the common fields are parsed; may refine or refuse them.
  Status (*parse)(const nlohmann::json& config, ModelConfig* out);
};

const std::vector<FamilyDef>& family_table();

Status parse_llama_family(const nlohmann::json& config, ModelConfig* out);       // llama.cc
Status parse_mistral_family(const nlohmann::json& config, ModelConfig* out);     // llama.cc
Status parse_qwen2_family(const nlohmann::json& config, ModelConfig* out);       // qwen2.cc
Status parse_qwen3_family(const nlohmann::json& config, ModelConfig* out);       // qwen3.cc
Status parse_qwen2_moe_family(const nlohmann::json& config, ModelConfig* out);   // moe_families.cc
Status parse_qwen3_moe_family(const nlohmann::json& config, ModelConfig* out);   // moe_families.cc
Status parse_mixtral_family(const nlohmann::json& config, ModelConfig* out);     // moe_families.cc
Status parse_qwen2_5_vl_family(const nlohmann::json& config, ModelConfig* out);  // qwen2_5_vl.cc
Status parse_qwen2_5_omni_thinker_family(const nlohmann::json& config,
                                         ModelConfig* out);  // qwen2_5_vl.cc

// Typed reads of optional config.json fields; a present field of the wrong type is an error
// naming it. JSON null counts as absent.
Result<std::optional<int64_t>> json_int(const nlohmann::json& config, const std::string& key);
Result<std::optional<double>> json_double(const nlohmann::json& config, const std::string& key);
Result<std::optional<bool>> json_bool(const nlohmann::json& config, const std::string& key);

// Qwen2/Qwen3 convention: `layer_types` when given, else layers >= max_window_layers use
// `sliding_window` when use_sliding_window is true.
Status parse_qwen_sliding_window(const nlohmann::json& config, ModelConfig* out);

}  // namespace qs::models
