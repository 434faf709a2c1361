// models: preset table for make-model and tests. Shapes from the published config.json of each
// model.
#include "models/model_presets.h"

namespace qs::models {
namespace {

struct Preset {
  const char* name;
  const char* config_json;
};

const Preset kPresets[] = {
    {"qwen2.5-0.5b", R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2",
      "hidden_size":896,"intermediate_size":4864,"num_hidden_layers":24,
      "num_attention_heads":14,"num_key_value_heads":2,"vocab_size":151936,
      "max_position_embeddings":32768,"rope_theta":1000000.0,"rms_norm_eps":1e-6,
      "tie_word_embeddings":true,"hidden_act":"silu","bos_token_id":151643,
      "eos_token_id":151643,"torch_dtype":"bfloat16"})"},
    {"qwen2.5-1.5b", R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2",
      "hidden_size":1536,"intermediate_size":8960,"num_hidden_layers":28,
      "num_attention_heads":12,"num_key_value_heads":2,"vocab_size":151936,
      "max_position_embeddings":32768,"rope_theta":1000000.0,"rms_norm_eps":1e-6,
      "tie_word_embeddings":true,"hidden_act":"silu","bos_token_id":151643,
      "eos_token_id":151643,"torch_dtype":"bfloat16"})"},
    {"qwen3-0.6b", R"({"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3",
      "hidden_size":1024,"intermediate_size":3072,"num_hidden_layers":28,
      "num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"vocab_size":151936,
      "max_position_embeddings":40960,"rope_theta":1000000,"rms_norm_eps":1e-6,
      "tie_word_embeddings":true,"attention_bias":false,"hidden_act":"silu",
      "bos_token_id":151643,"eos_token_id":151645,"torch_dtype":"bfloat16"})"},
    {"tinyllama-1.1b", R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",
      "hidden_size":2048,"intermediate_size":5632,"num_hidden_layers":22,
      "num_attention_heads":32,"num_key_value_heads":4,"vocab_size":32000,
      "max_position_embeddings":2048,"rope_theta":10000.0,"rms_norm_eps":1e-5,
      "tie_word_embeddings":false,"hidden_act":"silu","bos_token_id":1,"eos_token_id":2,
      "torch_dtype":"bfloat16"})"},
    {"llama-3.2-1b", R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",
      "hidden_size":2048,"intermediate_size":8192,"num_hidden_layers":16,
      "num_attention_heads":32,"num_key_value_heads":8,"head_dim":64,"vocab_size":128256,
      "max_position_embeddings":131072,"rope_theta":500000.0,"rms_norm_eps":1e-5,
      "rope_scaling":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,
        "original_max_position_embeddings":8192,"rope_type":"llama3"},
      "tie_word_embeddings":true,"hidden_act":"silu","bos_token_id":128000,
      "eos_token_id":128001,"torch_dtype":"bfloat16"})"},
    {"mistral-7b", R"({"architectures":["MistralForCausalLM"],"model_type":"mistral",
      "hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
      "num_attention_heads":32,"num_key_value_heads":8,"vocab_size":32768,
      "max_position_embeddings":32768,"rope_theta":1000000.0,"rms_norm_eps":1e-5,
      "sliding_window":null,"tie_word_embeddings":false,"hidden_act":"silu",
      "bos_token_id":1,"eos_token_id":2,"torch_dtype":"bfloat16"})"},
    // Mixture-of-Experts.
    {"qwen3-30b-a3b", R"({"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe",
      "hidden_size":2048,"intermediate_size":6144,"moe_intermediate_size":768,
      "num_experts":128,"num_experts_per_tok":8,"norm_topk_prob":true,
      "decoder_sparse_step":1,"mlp_only_layers":[],"num_hidden_layers":48,
      "num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"vocab_size":151936,
      "max_position_embeddings":40960,"rope_theta":1000000.0,"rms_norm_eps":1e-6,
      "tie_word_embeddings":false,"attention_bias":false,"use_sliding_window":false,
      "hidden_act":"silu","bos_token_id":151643,"eos_token_id":151645,
      "torch_dtype":"bfloat16"})"},
    {"qwen1.5-moe-a2.7b", R"({"architectures":["Qwen2MoeForCausalLM"],"model_type":"qwen2_moe",
      "hidden_size":2048,"intermediate_size":5632,"moe_intermediate_size":1408,
      "shared_expert_intermediate_size":5632,"num_experts":60,"num_experts_per_tok":4,
      "norm_topk_prob":false,"decoder_sparse_step":1,"num_hidden_layers":24,
      "num_attention_heads":16,"num_key_value_heads":16,"vocab_size":151936,
      "max_position_embeddings":8192,"rope_theta":1000000.0,"rms_norm_eps":1e-6,
      "tie_word_embeddings":false,"use_sliding_window":false,"hidden_act":"silu",
      "bos_token_id":151643,"eos_token_id":151643,"torch_dtype":"bfloat16"})"},
    {"mixtral-8x7b", R"({"architectures":["MixtralForCausalLM"],"model_type":"mixtral",
      "hidden_size":4096,"intermediate_size":14336,"num_local_experts":8,
      "num_experts_per_tok":2,"num_hidden_layers":32,"num_attention_heads":32,
      "num_key_value_heads":8,"vocab_size":32000,"max_position_embeddings":32768,
      "rope_theta":1000000.0,"rms_norm_eps":1e-5,"sliding_window":null,
      "tie_word_embeddings":false,"hidden_act":"silu","bos_token_id":1,"eos_token_id":2,
      "torch_dtype":"bfloat16"})"},
};

}  // namespace

Result<nlohmann::json> model_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return nlohmann::json::parse(p.config_json);
  }
  std::string known;
  for (const auto& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("unknown model preset '" + name + "'; known: " + known);
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.push_back(p.name);
  return names;
}

}  // namespace qs::models
