// models: one component folder of a diffusers pipeline directory (transformer/, vae/,
// text_encoder/, ...) or a transformers model directory read module by module (Whisper): its
// config.json and its weights, which diffusers names diffusion_pytorch_model.safetensors and
// transformers model.safetensors (either may be sharded with a .index.json; io::Checkpoint reads
// both). Tensors are zero-copy views of the mapped files; the getters check shapes and name the
// folder, the tensor and the expected and found shapes. A component whose config carries a
// quantization_config (an AutoRound W4A16 transformer/, as auto-round exports FLUX) has its linears
// built by the LLM loader (models/linear_loader.h), so every layout and kernel of the text models
// serves it too. In a full Qwen2.5-Omni directory the component is the thinker
// (models/model_root.h): config() is thinker_config and the tensors are read under "thinker.",
// so the towers ask for "visual.*" and "audio_tower.*" as in a thinker-only checkpoint.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"
#include "ops/linear.h"

namespace qs::models {

class LinearLoader;

class Component {
 public:
  static Result<Component> open(const std::string& dir);
  // config.json (and its quantization config) only, for sizing a component whose weights are
  // not there; has() is false and the getters fail.
  static Result<Component> open_config(const std::string& dir);
  bool has_weights() const { return ckpt_ != nullptr; }

  const std::string& dir() const { return dir_; }
  // config.json, or the part of it that configures this component (thinker_config).
  const nlohmann::json& config() const { return config_; }
  // The prefix of this component's tensors in the directory ("thinker."; "" for the whole).
  const std::string& tensor_prefix() const { return root_; }
  bool has(const std::string& name) const { return ckpt_ && ckpt_->has(name); }
  const io::Checkpoint& checkpoint() const { return *ckpt_; }  // has_weights() only
  // Detected from config.json's quantization_config (or quantization_config.json); none for
  // a 16-bit component.
  const io::QuantConfig& quantization() const { return *quant_; }

  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape) const;
  // The tensor converted to f32 (norm weights, biases, convolution kernels).
  Result<std::vector<float>> f32(const std::string& name, const std::vector<int64_t>& shape) const;
  // A matmul weight [n, k] as ops::linear runs it, and its bias [n] when `bias` is non-null:
  // a view of a 16-bit weight, or the resident quantized matrix of a quantized one.
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
  std::string root_;
  nlohmann::json config_;
  // Shared so that a Component can be moved: the loader keeps references to both.
  std::shared_ptr<const io::Checkpoint> ckpt_;
  std::shared_ptr<const io::QuantConfig> quant_;
  std::shared_ptr<models::LinearLoader> loader_;  // only when quantized
};

}  // namespace qs::models
