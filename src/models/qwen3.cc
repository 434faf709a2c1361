// models: the Qwen3 family (Qwen3ForCausalLM): Llama blocks plus an RMSNorm over head_dim of
// every q and k head before RoPE (q_norm, k_norm), an explicit head_dim that may differ from
// hidden_size / num_attention_heads, and `attention_bias` on q, k, v and o.
#include "models/families.h"

namespace qs::models {

Status parse_qwen3_family(const nlohmann::json& config, ModelConfig* out) {
  // Qwen3Config defaults head_dim to 128 when absent (not hidden / heads).
  if (!config.contains("head_dim") || config["head_dim"].is_null()) out->head_dim = 128;
  QS_ASSIGN_OR_RETURN(auto attention_bias, json_bool(config, "attention_bias"));
  out->qkv_bias = out->o_bias = attention_bias.value_or(false);
  out->qk_norm = true;
  return parse_qwen_sliding_window(config, out);
}

}  // namespace qs::models
