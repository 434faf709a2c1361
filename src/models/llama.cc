// models: the Llama family (LlamaForCausalLM) and Mistral (MistralForCausalLM), which is Llama
// with an optional sliding window over all layers. Both run on the shared decoder blocks
// (blocks.h); this file reads the config.json fields only they have.
#include "models/families.h"

namespace qs::models {

Status parse_llama_family(const nlohmann::json& config, ModelConfig* out) {
  // transformers' LlamaAttention puts `attention_bias` on q, k, v and o alike.
  QS_ASSIGN_OR_RETURN(auto attention_bias, json_bool(config, "attention_bias"));
  out->qkv_bias = out->o_bias = attention_bias.value_or(false);
  QS_ASSIGN_OR_RETURN(auto mlp_bias, json_bool(config, "mlp_bias"));
  out->mlp_bias = mlp_bias.value_or(false);
  return ok_status();
}

Status parse_mistral_family(const nlohmann::json& config, ModelConfig* out) {
  // MistralAttention has no biases; `sliding_window` (null = full attention) covers every
  // layer.
  QS_ASSIGN_OR_RETURN(auto window, json_int(config, "sliding_window"));
  if (window) {
    if (*window <= 0)
      return invalid_argument("config field 'sliding_window' must be positive or null");
    out->sliding_window.assign(out->n_layers, *window);
  }
  return ok_status();
}

}  // namespace qs::models
