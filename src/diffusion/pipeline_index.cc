#include "diffusion/pipeline_index.h"

#include <filesystem>

#include "core/json.h"
#include "diffusion/pipeline_registry.h"

namespace qs::diffusion {

namespace fs = std::filesystem;

const PipelineComponent* PipelineIndex::find(const std::string& name) const {
  for (const PipelineComponent& c : components) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Result<std::string> PipelineIndex::component_dir(const std::string& name) const {
  if (!has(name)) {
    return invalid_argument(dir + "/model_index.json: the " + class_name + " has no " + name +
                            " component");
  }
  const fs::path p = fs::path(dir) / name;
  std::error_code ec;
  if (!fs::is_directory(p, ec)) {
    return not_found(p.string() + ": the " + name + " component that model_index.json names " +
                     "is missing");
  }
  return p.string();
}

std::vector<std::string> PipelineIndex::transformers() const {
  std::vector<std::string> out;
  for (const char* name : {"transformer", "transformer_2"}) {
    if (has(name)) out.push_back(name);
  }
  return out;
}

std::optional<double> PipelineIndex::number(const std::string& key) const {
  if (config.contains(key) && config[key].is_number()) return config[key].get<double>();
  return std::nullopt;
}

bool PipelineIndex::flag(const std::string& key) const {
  return config.contains(key) && config[key].is_boolean() && config[key].get<bool>();
}

size_t component_weight_bytes(const std::string& component_dir) {
  size_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(component_dir, ec)) {
    if (e.path().extension() == ".safetensors") total += e.file_size(ec);
  }
  return total;
}

bool is_pipeline_dir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "model_index.json", ec);
}

Result<PipelineIndex> read_pipeline_index(const std::string& dir) {
  const std::string file = (fs::path(dir) / "model_index.json").string();
  QS_ASSIGN_OR_RETURN(nlohmann::json j, read_json(file));
  if (!j.is_object()) return invalid_argument(file + ": not a JSON object");
  PipelineIndex index;
  index.dir = dir;
  index.class_name = json_string_or(j, "_class_name", "");
  index.family = family_for_class(index.class_name);
  if (index.family == nullptr) {
    return unimplemented(
        file + ": _class_name " +
        (index.class_name.empty() ? std::string("missing") : "\"" + index.class_name + "\"") +
        " (quantserve runs " + known_pipeline_classes() + ")");
  }
  // Components are ["library", "Class"]; settings are everything else (and keys with '_').
  for (auto it = j.begin(); it != j.end(); ++it) {
    const nlohmann::json& v = it.value();
    if (it.key().empty() || it.key()[0] == '_' || !v.is_array() || v.size() != 2) continue;
    if (v[0].is_null() || v[1].is_null()) continue;  // an absent optional component
    if (!v[0].is_string() || !v[1].is_string()) {
      return invalid_argument(file + ": component " + it.key() + " is " + v.dump() +
                              ", not [\"library\", \"Class\"]");
    }
    index.components.push_back({it.key(), v[0].get<std::string>(), v[1].get<std::string>()});
  }
  index.config = std::move(j);
  return index;
}

}  // namespace qs::diffusion
