// models: the Mixture-of-Experts families. Qwen2-MoE (Qwen2MoeForCausalLM: Qwen2 attention,
// routed experts plus an always-on shared expert behind a sigmoid gate), Qwen3-MoE
// (Qwen3MoeForCausalLM: Qwen3 attention, routed experts) and Mixtral (MixtralForCausalLM:
// Mistral attention, routed experts under block_sparse_moe with w1/w3/w2 names). The config
// keys are the ones transformers reads; router_aux_loss_coef, output_router_logits and
// router_jitter_noise only matter in training and are ignored.
#include <set>

#include "core/limits.h"
#include "models/families.h"

namespace qs::models {
namespace {

Status positive_field(const nlohmann::json& config, const std::string& key, int64_t fallback,
                      int64_t* out) {
  QS_ASSIGN_OR_RETURN(auto v, json_int(config, key));
  const int64_t value = v.value_or(fallback);
  if (value <= 0) {
    return invalid_argument("config field '" + key + "' must be positive, got " +
                            std::to_string(value));
  }
  QS_RETURN_IF_ERROR(
      limits::check_at_most(value, limits::kMaxHiddenDim, "config field '" + key + "'"));
  *out = value;
  return ok_status();
}

// The expert count under either of its names, top-k, and which layers are sparse:
// (layer + 1) % decoder_sparse_step == 0 and not in mlp_only_layers, as transformers builds
// its decoder layers.
Status parse_routing(const nlohmann::json& config, ModelConfig* out) {
  MoeConfig& moe = out->moe;
  QS_ASSIGN_OR_RETURN(auto experts, json_int(config, "num_experts"));
  if (!experts) {
    QS_ASSIGN_OR_RETURN(experts, json_int(config, "num_local_experts"));
  }
  if (!experts) {
    return invalid_argument("config field 'num_experts' (or 'num_local_experts') is missing");
  }
  if (*experts <= 0 || *experts > limits::kMaxExperts) {
    return invalid_argument("config field 'num_experts' must be in 1.." +
                            std::to_string(limits::kMaxExperts) + ", got " +
                            std::to_string(*experts));
  }
  moe.n_experts = *experts;
  QS_ASSIGN_OR_RETURN(auto top_k, json_int(config, "num_experts_per_tok"));
  if (!top_k) return invalid_argument("config field 'num_experts_per_tok' is missing");
  if (*top_k <= 0 || *top_k > moe.n_experts) {
    return invalid_argument("config field 'num_experts_per_tok' (" + std::to_string(*top_k) +
                            ") must be in 1..num_experts (" + std::to_string(moe.n_experts) + ")");
  }
  moe.top_k = *top_k;

  int64_t step = 1;
  QS_RETURN_IF_ERROR(positive_field(config, "decoder_sparse_step", 1, &step));
  std::set<int64_t> dense_layers;
  auto only = config.find("mlp_only_layers");
  if (only != config.end() && !only->is_null()) {
    if (!only->is_array()) return invalid_argument("config field 'mlp_only_layers' must be a list");
    for (const auto& v : *only) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= out->n_layers) {
        return invalid_argument("config field 'mlp_only_layers' holds " + v.dump() +
                                ", not a layer index below " + std::to_string(out->n_layers));
      }
      dense_layers.insert(v.get<int64_t>());
    }
  }
  out->moe_layer.assign(out->n_layers, false);
  for (int64_t i = 0; i < out->n_layers; ++i) {
    out->moe_layer[i] = dense_layers.count(i) == 0 && (i + 1) % step == 0;
  }
  return ok_status();
}

}  // namespace

Status parse_qwen2_moe_family(const nlohmann::json& config, ModelConfig* out) {
  QS_ASSIGN_OR_RETURN(auto qkv_bias, json_bool(config, "qkv_bias"));
  out->qkv_bias = qkv_bias.value_or(true);
  QS_RETURN_IF_ERROR(parse_routing(config, out));
  MoeConfig& moe = out->moe;
  // Qwen2MoeConfig's defaults.
  QS_RETURN_IF_ERROR(
      positive_field(config, "moe_intermediate_size", 1408, &moe.expert_intermediate));
  QS_ASSIGN_OR_RETURN(auto shared, json_int(config, "shared_expert_intermediate_size"));
  moe.shared_intermediate = shared.value_or(5632);
  if (moe.shared_intermediate < 0) {
    return invalid_argument("config field 'shared_expert_intermediate_size' must not be negative");
  }
  QS_ASSIGN_OR_RETURN(auto norm, json_bool(config, "norm_topk_prob"));
  moe.norm_topk_prob = norm.value_or(false);
  // Qwen2MoeConfig's own rule when layer_types is absent: odd layers below max_window_layers.
  QS_ASSIGN_OR_RETURN(auto use, json_bool(config, "use_sliding_window"));
  if (use.value_or(false) && !config.contains("layer_types")) {
    QS_ASSIGN_OR_RETURN(auto window, json_int(config, "sliding_window"));
    QS_ASSIGN_OR_RETURN(auto max_window_layers, json_int(config, "max_window_layers"));
    if (!window || *window <= 0) {
      return invalid_argument("config field 'sliding_window' must be positive or null");
    }
    for (int64_t i = 0; i < out->n_layers; ++i) {
      if ((i + 1) % 2 != 0 && i < max_window_layers.value_or(28)) out->sliding_window[i] = *window;
    }
    return ok_status();
  }
  return parse_qwen_sliding_window(config, out);
}

Status parse_qwen3_moe_family(const nlohmann::json& config, ModelConfig* out) {
  // Unlike dense Qwen3, head_dim defaults to hidden_size / num_attention_heads
  // (Qwen3MoeAttention's getattr), which the common parser has already set.
  QS_ASSIGN_OR_RETURN(auto attention_bias, json_bool(config, "attention_bias"));
  out->qkv_bias = out->o_bias = attention_bias.value_or(false);
  out->qk_norm = true;
  QS_RETURN_IF_ERROR(parse_routing(config, out));
  MoeConfig& moe = out->moe;
  QS_RETURN_IF_ERROR(
      positive_field(config, "moe_intermediate_size", 768, &moe.expert_intermediate));
  QS_ASSIGN_OR_RETURN(auto norm, json_bool(config, "norm_topk_prob"));
  moe.norm_topk_prob = norm.value_or(false);
  // Qwen3MoeAttention applies sliding_window (when use_sliding_window) to every layer.
  QS_ASSIGN_OR_RETURN(auto use, json_bool(config, "use_sliding_window"));
  QS_ASSIGN_OR_RETURN(auto window, json_int(config, "sliding_window"));
  if (use.value_or(false) && window) {
    if (*window <= 0)
      return invalid_argument("config field 'sliding_window' must be positive or null");
    out->sliding_window.assign(out->n_layers, *window);
  }
  return ok_status();
}

Status parse_mixtral_family(const nlohmann::json& config, ModelConfig* out) {
  QS_RETURN_IF_ERROR(parse_mistral_family(config, out));
  QS_RETURN_IF_ERROR(parse_routing(config, out));
  // Every Mixtral layer is sparse; its experts have intermediate_size columns and the router
  // always renormalises its top-k.
  out->moe_layer.assign(out->n_layers, true);
  out->moe.expert_intermediate = out->intermediate_size;
  out->moe.norm_topk_prob = true;
  out->moe.naming = ExpertNaming::kMixtral;
  return ok_status();
}

}  // namespace qs::models
