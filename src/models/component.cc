// models: a component folder's config and weights (see component.h).
#include "models/component.h"

#include <filesystem>

#include "core/json.h"
#include "models/linear_loader.h"
#include "models/model_root.h"

namespace qs::models {

namespace fs = std::filesystem;

Result<Component> Component::open_config(const std::string& dir) {
  Component c;
  c.dir_ = dir;
  const std::string path = (fs::path(dir) / "config.json").string();
  QS_ASSIGN_OR_RETURN(nlohmann::json file, read_json(path));
  if (!file.is_object()) return invalid_argument(path + ": not a JSON object");
  // A full Qwen2.5-Omni directory: the towers are the thinker's, configured by thinker_config
  // and stored under "thinker."; its quantization_config sits at the top of the file.
  auto root = find_model_root(file);
  if (!root.ok()) return root.status().with_context(path);
  c.config_ = *root->config;
  c.root_ = root->tensor_prefix;
  QS_ASSIGN_OR_RETURN(io::QuantConfig quant, io::load_quant_config(dir, file));
  if (!c.root_.empty()) quant = quant.rooted(c.root_);
  c.quant_ = std::make_shared<const io::QuantConfig>(std::move(quant));
  return c;
}

Result<Component> Component::open(const std::string& dir) {
  QS_ASSIGN_OR_RETURN(Component c, open_config(dir));
  // diffusers saves diffusion_pytorch_model.*, transformers (the text encoders) model.*.
  QS_ASSIGN_OR_RETURN(io::Checkpoint ckpt,
                      io::Checkpoint::open(dir, io::Checkpoint::base_name(dir)));
  if (!c.root_.empty()) {
    QS_ASSIGN_OR_RETURN(ckpt, ckpt.rooted(c.root_));
  }
  c.ckpt_ = std::make_shared<const io::Checkpoint>(std::move(ckpt));
  if (c.quant_->quantized())
    c.loader_ = std::make_shared<models::LinearLoader>(*c.ckpt_, *c.quant_);
  return c;
}

Result<Tensor> Component::get(const std::string& name, const std::vector<int64_t>& shape) const {
  if (!ckpt_) return not_found(dir_ + ": tensor '" + name + "': no weights opened (config only)");
  QS_ASSIGN_OR_RETURN(Tensor t, ckpt_->get(name, shape));
  if (!dtype_is_float(t.dtype)) {
    return invalid_argument(dir_ + ": tensor '" + name + "' is " + dtype_name(t.dtype) +
                            ", not a float tensor");
  }
  return t;
}

Result<std::vector<float>> Component::f32(const std::string& name,
                                          const std::vector<int64_t>& shape) const {
  QS_ASSIGN_OR_RETURN(Tensor t, get(name, shape));
  return t.to_f32();
}

Result<ops::LinearWeight> Component::linear(const std::string& prefix, int64_t n, int64_t k,
                                            std::vector<float>* bias) const {
  if (bias) {
    QS_ASSIGN_OR_RETURN(*bias, f32(prefix + ".bias", {n}));
  }
  if (!loader_) {
    QS_ASSIGN_OR_RETURN(Tensor w, get(prefix + ".weight", {n, k}));
    return ops::LinearWeight(std::move(w));
  }
  // The loader decides from the stored tensors (qweight or a 16-bit weight) and the config.
  ops::LinearWeight w;
  formats::QuantScheme scheme;
  size_t stored = 0;
  QS_RETURN_IF_ERROR(loader_->load_checked(prefix, n, k, &w, &scheme, &stored).with_context(dir_));
  return w;
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

}  // namespace qs::models
