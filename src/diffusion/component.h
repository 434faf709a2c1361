// diffusion: one component folder of a diffusers pipeline directory (transformer/, vae/,
// text_encoder/, ...): its config.json and its weights, which diffusers names
// diffusion_pytorch_model.safetensors and transformers model.safetensors (either may be
// sharded with a .index.json). Tensors are zero-copy views of the mapped files; the getters
// check shapes and name the folder, the tensor and the expected and found shapes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/linear.h"

namespace qs::diffusion {

class Component {
 public:
  static Result<Component> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }

  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape) const;
  // The tensor converted to f32 (norm weights, biases, convolution kernels).
  Result<std::vector<float>> f32(const std::string& name, const std::vector<int64_t>& shape) const;
  // A matmul weight [n, k] as ops::linear runs it, and its bias [n] when `bias` is non-null.
  Result<ops::LinearWeight> linear(const std::string& prefix, int64_t n, int64_t k,
                                   std::vector<float>* bias) const;

  // config.json fields: a missing key gives `fallback`; a present one of the wrong type is an
  // error naming the file and key.
  Result<int64_t> int_field(const std::string& key, int64_t fallback) const;
  Result<double> number_field(const std::string& key, double fallback) const;
  Result<bool> bool_field(const std::string& key, bool fallback) const;
  Result<std::string> string_field(const std::string& key, const std::string& fallback) const;
  Result<std::vector<int64_t>> int_list_field(const std::string& key,
                                              const std::vector<int64_t>& fallback) const;

 private:
  std::string dir_;
  nlohmann::json config_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace qs::diffusion
