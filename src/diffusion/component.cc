// diffusion: a pipeline component folder's config and weights (see component.h).
#include "diffusion/component.h"

#include <filesystem>
#include <set>

#include "core/mmap_file.h"
#include "io/checkpoint.h"

namespace qs::diffusion {

namespace fs = std::filesystem;

namespace {

// The safetensors files of a component: a single file, else every shard its index names.
Result<std::vector<std::string>> weight_files(const std::string& dir) {
  for (const char* base : {"diffusion_pytorch_model", "model"}) {
    const fs::path index = fs::path(dir) / (std::string(base) + ".safetensors.index.json");
    if (fs::exists(index)) {
      QS_ASSIGN_OR_RETURN(nlohmann::json j, io::read_json(index.string()));
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
        return data_loss(index.string() + ": no \"weight_map\" object");
      }
      std::set<std::string> shards;
      for (const auto& [name, file] : j["weight_map"].items()) {
        if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
          return data_loss(index.string() + ": bad shard name for '" + name + "'");
        }
        shards.insert(file.get<std::string>());
      }
      std::vector<std::string> out;
      for (const auto& s : shards) out.push_back((fs::path(dir) / s).string());
      return out;
    }
    const fs::path single = fs::path(dir) / (std::string(base) + ".safetensors");
    if (fs::exists(single)) return std::vector<std::string>{single.string()};
  }
  return not_found(dir + ": no diffusion_pytorch_model.safetensors or model.safetensors");
}

}  // namespace

Result<Component> Component::open(const std::string& dir) {
  Component c;
  c.dir_ = dir;
  QS_ASSIGN_OR_RETURN(c.config_, io::read_json((fs::path(dir) / "config.json").string()));
  if (!c.config_.is_object()) return invalid_argument(dir + "/config.json: not a JSON object");
  QS_ASSIGN_OR_RETURN(std::vector<std::string> files, weight_files(dir));
  for (const auto& path : files) {
    QS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
    std::vector<std::pair<std::string, Tensor>> tensors;
    QS_RETURN_IF_ERROR(io::read_safetensors(file, &tensors, nullptr).with_context(path));
    for (auto& [name, t] : tensors) {
      if (!c.tensors_.emplace(name, t).second) {
        return data_loss(path + ": tensor '" + name + "' is stored twice");
      }
    }
  }
  return c;
}

Result<Tensor> Component::get(const std::string& name, const std::vector<int64_t>& shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return not_found(dir_ + ": tensor '" + name + "' not found");
  if (it->second.shape != shape) {
    return invalid_argument(dir_ + ": tensor '" + name + "' has shape " +
                            shape_string(it->second.shape) + ", expected " + shape_string(shape));
  }
  if (!dtype_is_float(it->second.dtype)) {
    return invalid_argument(dir_ + ": tensor '" + name + "' is not a float tensor");
  }
  return it->second;
}

Result<std::vector<float>> Component::f32(const std::string& name,
                                          const std::vector<int64_t>& shape) const {
  QS_ASSIGN_OR_RETURN(Tensor t, get(name, shape));
  return t.to_f32();
}

Result<ops::LinearWeight> Component::linear(const std::string& prefix, int64_t n, int64_t k,
                                            std::vector<float>* bias) const {
  QS_ASSIGN_OR_RETURN(Tensor w, get(prefix + ".weight", {n, k}));
  if (bias) {
    QS_ASSIGN_OR_RETURN(*bias, f32(prefix + ".bias", {n}));
  }
  return ops::LinearWeight(std::move(w));
}

namespace {

template <typename T, typename Check>
Result<T> field(const nlohmann::json& j, const std::string& dir, const std::string& key, T fallback,
                Check is_type, const char* type_name) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!is_type(j[key])) {
    return invalid_argument(dir + "/config.json: '" + key + "' is not " + type_name);
  }
  return j[key].get<T>();
}

}  // namespace

Result<int64_t> Component::int_field(const std::string& key, int64_t fallback) const {
  return field<int64_t>(
      config_, dir_, key, fallback, [](const nlohmann::json& v) { return v.is_number_integer(); },
      "an integer");
}

Result<double> Component::number_field(const std::string& key, double fallback) const {
  return field<double>(
      config_, dir_, key, fallback, [](const nlohmann::json& v) { return v.is_number(); },
      "a number");
}

Result<bool> Component::bool_field(const std::string& key, bool fallback) const {
  return field<bool>(
      config_, dir_, key, fallback, [](const nlohmann::json& v) { return v.is_boolean(); },
      "a boolean");
}

Result<std::string> Component::string_field(const std::string& key,
                                            const std::string& fallback) const {
  return field<std::string>(
      config_, dir_, key, fallback, [](const nlohmann::json& v) { return v.is_string(); },
      "a string");
}

Result<std::vector<int64_t>> Component::int_list_field(const std::string& key,
                                                       const std::vector<int64_t>& fallback) const {
  if (!config_.contains(key) || config_[key].is_null()) return fallback;
  const auto& v = config_[key];
  std::vector<int64_t> out;
  if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer()) break;
      out.push_back(e.get<int64_t>());
    }
    if (out.size() == v.size()) return out;
  }
  return invalid_argument(dir_ + "/config.json: '" + key + "' is not a list of integers");
}

}  // namespace qs::diffusion
