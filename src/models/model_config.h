// models: the hyper-parameters of a decoder-only checkpoint, read from its config.json, and
// the declarative list of tensors such a checkpoint must hold. The list is the one truth used
// by the loader (validation) and by `quantserve make-model` (random checkpoints at real
// shapes). Family quirks (Qwen2 q/k/v bias, Qwen3 q/k-norm, Mistral sliding window) are flags
// here, set by each family's parser (llama.cc, qwen2.cc, qwen3.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::models {

enum class Family { kLlama, kMistral, kQwen2, kQwen3 };

// rope_scaling of config.json; kNone also stands for rope_type "default".
enum class RopeScaling { kNone, kLinear, kDynamic, kLlama3 };

struct RopeConfig {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;
  // llama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture;  // as written in config.json, e.g. "Qwen2ForCausalLM"
  Family family = Family::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // may differ from hidden_size / n_heads (Qwen3)
  // Longest sequence (prompt + completion) the model is run on.
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v_proj carry a bias (Qwen2; Llama/Qwen3 attention_bias)
  bool o_bias = false;    // o_proj carries a bias (Llama/Qwen3 attention_bias)
  bool mlp_bias = false;  // gate/up/down_proj carry a bias (Llama mlp_bias)
  bool qk_norm = false;   // RMSNorm over head_dim of each q and k head before RoPE (Qwen3)
  // Per layer: attend only to the last `window` positions (HF: kv_idx > q_idx - window);
  // 0 = full causal attention. [n_layers]
  std::vector<int64_t> sliding_window;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
};

// Parses a config.json object. Unknown architectures are an error that names them and lists
// the supported ones; missing or inconsistent fields are errors naming the field.
Result<ModelConfig> parse_model_config(const nlohmann::json& config);
// Reads <dir>/config.json and parses it; errors name the file.
Result<ModelConfig> load_model_config(const std::string& dir);

// The architectures parse_model_config accepts, e.g. "LlamaForCausalLM".
std::vector<std::string> supported_architectures();

// Rotary inverse frequencies, [head_dim / 2], with rope_scaling applied exactly as
// transformers' ROPE_INIT_FUNCTIONS (default, linear, llama3; dynamic equals default within
// max_position_embeddings, which is the longest context we accept).
std::vector<float> rope_inv_freq(const ModelConfig& config);

struct TensorSpec {
  std::string name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // row-major, as stored: nn.Linear weights are [out, in]
};

// Every tensor a checkpoint of `config` must hold, in a stable order (embedding, layers, final
// norm, lm_head unless tied).
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

}  // namespace qs::models
