// models: config.json parsing common to every family, RoPE frequencies and the tensor list.
#include "models/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "core/json.h"
#include "core/limits.h"
#include "io/checkpoint.h"
#include "models/families.h"
#include "models/model_root.h"

namespace qs::models {

using nlohmann::json;

const std::vector<FamilyDef>& family_table() {
  static const std::vector<FamilyDef> kTable = {
      {"LlamaForCausalLM", Family::kLlama, parse_llama_family},
      {"MistralForCausalLM", Family::kMistral, parse_mistral_family},
      {"Qwen2ForCausalLM", Family::kQwen2, parse_qwen2_family},
      {"Qwen3ForCausalLM", Family::kQwen3, parse_qwen3_family},
      {"Qwen2MoeForCausalLM", Family::kQwen2Moe, parse_qwen2_moe_family},
      {"Qwen3MoeForCausalLM", Family::kQwen3Moe, parse_qwen3_moe_family},
      {"MixtralForCausalLM", Family::kMixtral, parse_mixtral_family},
      {"Qwen2_5_VLForConditionalGeneration", Family::kQwen2_5_VL, parse_qwen2_5_vl_family},
      {"Qwen2_5OmniThinkerForConditionalGeneration", Family::kQwen2_5_OmniThinker,
       parse_qwen2_5_omni_thinker_family},
  };
  return kTable;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& f : family_table()) names.emplace_back(f.architecture);
  return names;
}

Result<std::optional<int64_t>> json_int(const json& config, const std::string& key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<int64_t>();
  // An unsigned value past INT64_MAX would wrap to a negative one.
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    return invalid_argument("config field '" + key + "' must be a 64-bit integer, got " +
                            it->dump());
  return std::optional<int64_t>(it->get<int64_t>());
}

Result<std::optional<double>> json_double(const json& config, const std::string& key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<double>();
  if (!it->is_number())
    return invalid_argument("config field '" + key + "' must be a number, got " + it->dump());
  return std::optional<double>(it->get<double>());
}

Result<std::optional<bool>> json_bool(const json& config, const std::string& key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean())
    return invalid_argument("config field '" + key + "' must be true or false, got " + it->dump());
  return std::optional<bool>(it->get<bool>());
}

namespace {

// A positive integer no larger than `limit` (limits.h): past it, the sizes built from the
// field would overflow shape arithmetic or make an allocation throw.
Status require_positive(const json& config, const std::string& key, int64_t limit, int64_t* out) {
  QS_ASSIGN_OR_RETURN(auto v, json_int(config, key));
  if (!v) return invalid_argument("config field '" + key + "' is missing");
  if (*v <= 0)
    return invalid_argument("config field '" + key + "' must be positive, got " +
                            std::to_string(*v));
  QS_RETURN_IF_ERROR(limits::check_at_most(*v, limit, "config field '" + key + "'"));
  *out = *v;
  return ok_status();
}

// Token ids are int32 from here on: a larger or negative id is an error, not a silent wrap.
Result<int32_t> token_id(const json& v, const std::string& key) {
  if (!v.is_number_integer())
    return invalid_argument("config field '" + key + "' must hold integers, got " + v.dump());
  if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t{limits::kMaxTokenId}
                             : v.get<int64_t>() < 0 || v.get<int64_t>() > limits::kMaxTokenId) {
    return out_of_range("config field '" + key + "' is " + v.dump() + ", outside 0.." +
                        std::to_string(limits::kMaxTokenId));
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

// rope_scaling (transformers <= 4.x) or rope_parameters (transformers 5), with the rope_type
// spelled "rope_type" or, in older configs, "type".
Status parse_rope(const json& config, RopeConfig* rope) {
  QS_ASSIGN_OR_RETURN(auto theta, json_double(config, "rope_theta"));
  const json* scaling = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = config.find(key);
    if (it != config.end() && !it->is_null()) {
      if (!it->is_object())
        return invalid_argument(std::string("config field '") + key + "' must be an object");
      scaling = &*it;
      break;
    }
  }
  if (scaling != nullptr && !theta) {
    QS_ASSIGN_OR_RETURN(theta, json_double(*scaling, "rope_theta"));
  }
  if (theta) {
    if (!(*theta > 0)) return invalid_argument("config field 'rope_theta' must be positive");
    rope->theta = *theta;
  }
  if (scaling == nullptr) return ok_status();

  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = scaling->find(key);
    if (it != scaling->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  // M-RoPE's sections are the family's to read (qwen2_5_vl.cc); its frequencies are default.
  if (type == "default" || type == "mrope") return ok_status();
  if (type != "linear" && type != "dynamic" && type != "llama3") {
    return unimplemented("rope_scaling type '" + type +
                         "' is not supported (supported: default, linear, dynamic, llama3)");
  }
  QS_ASSIGN_OR_RETURN(auto factor, json_double(*scaling, "factor"));
  if (!factor) return invalid_argument("rope_scaling '" + type + "' needs 'factor'");
  if (!(*factor > 0)) return invalid_argument("rope_scaling 'factor' must be positive");
  rope->factor = *factor;
  if (type == "linear") {
    rope->scaling = RopeScaling::kLinear;
  } else if (type == "dynamic") {
    rope->scaling = RopeScaling::kDynamic;
  } else {
    rope->scaling = RopeScaling::kLlama3;
    QS_ASSIGN_OR_RETURN(auto low, json_double(*scaling, "low_freq_factor"));
    QS_ASSIGN_OR_RETURN(auto high, json_double(*scaling, "high_freq_factor"));
    QS_ASSIGN_OR_RETURN(auto orig, json_int(*scaling, "original_max_position_embeddings"));
    if (!low || !high || !orig) {
      return invalid_argument(
          "rope_scaling 'llama3' needs low_freq_factor, high_freq_factor and "
          "original_max_position_embeddings");
    }
    if (!(*high > *low) || *low <= 0 || *orig <= 0) {
      return invalid_argument(
          "rope_scaling 'llama3' needs 0 < low_freq_factor < high_freq_factor and "
          "original_max_position_embeddings > 0");
    }
    rope->low_freq_factor = *low;
    rope->high_freq_factor = *high;
    rope->original_max_position_embeddings = *orig;
  }
  return ok_status();
}

Status parse_token_ids(const json& config, ModelConfig* out) {
  if (auto bos = config.find("bos_token_id"); bos != config.end() && !bos->is_null()) {
    QS_ASSIGN_OR_RETURN(out->bos_token_id, token_id(*bos, "bos_token_id"));
  }
  auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return ok_status();
  if (it->is_number_integer()) {
    QS_ASSIGN_OR_RETURN(int32_t id, token_id(*it, "eos_token_id"));
    out->eos_token_ids.push_back(id);
  } else if (it->is_array()) {
    for (const auto& e : *it) {
      QS_ASSIGN_OR_RETURN(int32_t id, token_id(e, "eos_token_id"));
      out->eos_token_ids.push_back(id);
    }
  } else {
    return invalid_argument("config field 'eos_token_id' must be an integer or a list of integers");
  }
  return ok_status();
}

}  // namespace

Status parse_qwen_sliding_window(const json& config, ModelConfig* out) {
  // transformers' Qwen2Config/Qwen3Config: sliding_window counts only when
  // use_sliding_window is true; layer_types, when given, picks the layers, else those from
  // max_window_layers on.
  QS_ASSIGN_OR_RETURN(auto use, json_bool(config, "use_sliding_window"));
  QS_ASSIGN_OR_RETURN(auto window_field, json_int(config, "sliding_window"));
  // 0: no window.
  const int64_t window = use.value_or(false) ? window_field.value_or(0) : 0;
  if (window < 0 || (use.value_or(false) && window_field && window == 0)) {
    return invalid_argument("config field 'sliding_window' must be positive or null");
  }
  auto types = config.find("layer_types");
  if (types != config.end() && !types->is_null()) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != out->n_layers) {
      return invalid_argument("config field 'layer_types' must list one type per layer (" +
                              std::to_string(out->n_layers) + ")");
    }
    for (int64_t i = 0; i < out->n_layers; ++i) {
      const json& t = (*types)[i];
      if (t == "full_attention") continue;
      if (t != "sliding_attention") {
        return unimplemented("layer type " + t.dump() + " is not supported");
      }
      out->sliding_window[i] = window;
    }
    return ok_status();
  }
  if (window == 0) return ok_status();
  QS_ASSIGN_OR_RETURN(auto max_window_layers, json_int(config, "max_window_layers"));
  // A negative start would index before the first layer.
  if (max_window_layers && *max_window_layers < 0) {
    return invalid_argument("config field 'max_window_layers' must not be negative, got " +
                            std::to_string(*max_window_layers));
  }
  // 28 is the default of Qwen2Config and Qwen3Config.
  for (int64_t i = max_window_layers.value_or(28); i < out->n_layers; ++i) {
    out->sliding_window[i] = window;
  }
  return ok_status();
}

Result<ModelConfig> parse_model_config(const json& file) {
  if (!file.is_object()) return invalid_argument("config.json must hold a JSON object");
  QS_ASSIGN_OR_RETURN(ModelRoot root, find_model_root(file));
  const json& top = *root.config;
  if (!top.is_object()) return invalid_argument("the model's config must be a JSON object");
  // Multimodal checkpoints saved by transformers 5 nest the decoder's fields under
  // text_config (the hub's Qwen2.5-VL keeps them at the top): read them as if at the top.
  json config = top;
  // A thinker_config saved without its architectures is still the thinker's.
  if (!root.tensor_prefix.empty() &&
      (!config.contains("architectures") || config["architectures"].is_null())) {
    config["architectures"] = {"Qwen2_5OmniThinkerForConditionalGeneration"};
  }
  if (auto text = top.find("text_config"); text != top.end() && !text->is_null()) {
    if (!text->is_object()) return invalid_argument("config field 'text_config' must be an object");
    for (const auto& [key, value] : text->items()) {
      if (key != "architectures") config[key] = value;
    }
  }
  ModelConfig out;
  out.tensor_prefix = root.tensor_prefix;
  out.container_architecture = root.container_architecture;
  out.skipped_parts = root.skipped_parts;
  auto arch = config.find("architectures");
  if (arch == config.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) {
    return invalid_argument("config field 'architectures' must be a non-empty list of names");
  }
  out.architecture = (*arch)[0].get<std::string>();
  const FamilyDef* family = nullptr;
  for (const auto& f : family_table()) {
    if (out.architecture == f.architecture) family = &f;
  }
  if (family == nullptr) {
    std::string list;
    for (const auto& name : supported_architectures()) list += (list.empty() ? "" : ", ") + name;
    return unimplemented("unsupported architecture '" + out.architecture + "' (supported: " + list +
                         ")");
  }
  out.family = family->family;

  QS_RETURN_IF_ERROR(require_positive(config, "vocab_size", limits::kMaxVocab, &out.vocab_size));
  QS_RETURN_IF_ERROR(
      require_positive(config, "hidden_size", limits::kMaxHiddenDim, &out.hidden_size));
  QS_RETURN_IF_ERROR(
      require_positive(config, "intermediate_size", limits::kMaxHiddenDim, &out.intermediate_size));
  QS_RETURN_IF_ERROR(
      require_positive(config, "num_hidden_layers", limits::kMaxLayers, &out.n_layers));
  QS_RETURN_IF_ERROR(
      require_positive(config, "num_attention_heads", limits::kMaxHeads, &out.n_heads));
  out.n_kv_heads = out.n_heads;
  if (config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()) {
    QS_RETURN_IF_ERROR(
        require_positive(config, "num_key_value_heads", limits::kMaxHeads, &out.n_kv_heads));
  }
  // 0 until a family or an explicit head_dim says otherwise; checked below.
  out.head_dim = out.hidden_size % out.n_heads == 0 ? out.hidden_size / out.n_heads : 0;
  if (config.contains("head_dim") && !config["head_dim"].is_null()) {
    QS_RETURN_IF_ERROR(require_positive(config, "head_dim", limits::kMaxHeadDim, &out.head_dim));
  }
  out.max_position_embeddings = 2048;  // transformers' LlamaConfig default
  if (config.contains("max_position_embeddings")) {
    QS_RETURN_IF_ERROR(require_positive(config, "max_position_embeddings", limits::kMaxContext,
                                        &out.max_position_embeddings));
  }
  QS_ASSIGN_OR_RETURN(auto eps, json_double(config, "rms_norm_eps"));
  if (eps) out.rms_norm_eps = *eps;
  QS_ASSIGN_OR_RETURN(auto tie, json_bool(config, "tie_word_embeddings"));
  out.tie_word_embeddings = tie.value_or(false);
  auto act = config.find("hidden_act");
  if (act != config.end() && !act->is_null() && *act != "silu") {
    return unimplemented("hidden_act " + act->dump() + " is not supported (only silu)");
  }
  QS_RETURN_IF_ERROR(parse_rope(config, &out.rope));
  QS_RETURN_IF_ERROR(parse_token_ids(config, &out));
  out.sliding_window.assign(out.n_layers, 0);

  QS_RETURN_IF_ERROR(family->parse(config, &out));

  if (out.n_heads % out.n_kv_heads != 0) {
    return invalid_argument("num_attention_heads (" + std::to_string(out.n_heads) +
                            ") must be a multiple of num_key_value_heads (" +
                            std::to_string(out.n_kv_heads) + ")");
  }
  if (out.head_dim == 0) {
    return invalid_argument("hidden_size (" + std::to_string(out.hidden_size) +
                            ") is not a multiple of num_attention_heads (" +
                            std::to_string(out.n_heads) + ") and no head_dim is given");
  }
  if (out.head_dim % 2 != 0)
    return invalid_argument("head_dim must be even for rotary embeddings, got " +
                            std::to_string(out.head_dim));
  if (!(out.rms_norm_eps > 0))
    return invalid_argument("config field 'rms_norm_eps' must be positive");
  return out;
}

Result<ModelConfig> load_model_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  QS_ASSIGN_OR_RETURN(json config, read_json(path));
  auto parsed = parse_model_config(config);
  if (!parsed.ok()) return parsed.status().with_context(path);
  return parsed;
}

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  const int64_t half = config.head_dim / 2;
  const RopeConfig& r = config.rope;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(config.head_dim);
    inv[i] = static_cast<float>(1.0 / std::pow(r.theta, static_cast<double>(exponent)));
  }
  if (r.scaling == RopeScaling::kLinear) {
    for (auto& f : inv) f = static_cast<float>(f / r.factor);
  } else if (r.scaling == RopeScaling::kLlama3) {
    // _compute_llama3_parameters: long wavelengths are slowed by `factor`, short ones kept,
    // and the band in between is interpolated smoothly.
    const double old_ctx = static_cast<double>(r.original_max_position_embeddings);
    const double low_freq_wavelen = old_ctx / r.low_freq_factor;
    const double high_freq_wavelen = old_ctx / r.high_freq_factor;
    for (auto& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f = static_cast<float>(f / r.factor);
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth =
            (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / r.factor + smooth * f);
      }
    }
  }
  return inv;
}

MlpNames mlp_names(const ModelConfig& c, int64_t layer, int64_t expert) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  if (!is_moe_layer(c, layer)) return {p + "mlp.gate_proj", p + "mlp.up_proj", p + "mlp.down_proj"};
  if (c.moe.naming == ExpertNaming::kMixtral) {
    const std::string e = p + "block_sparse_moe.experts." + std::to_string(expert) + ".";
    return {e + "w1", e + "w3", e + "w2"};
  }
  const std::string e =
      expert < 0 ? p + "mlp.shared_expert." : p + "mlp.experts." + std::to_string(expert) + ".";
  return {e + "gate_proj", e + "up_proj", e + "down_proj"};
}

std::string router_name(const ModelConfig& c, int64_t layer) {
  return "model.layers." + std::to_string(layer) +
         (c.moe.naming == ExpertNaming::kMixtral ? ".block_sparse_moe.gate" : ".mlp.gate");
}

std::string shared_gate_name(const ModelConfig&, int64_t layer) {
  return "model.layers." + std::to_string(layer) + ".mlp.shared_expert_gate";
}

std::vector<LayerLinear> layer_linears(const ModelConfig& c, int64_t layer) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
  std::vector<LayerLinear> out = {{p + "q_proj", LinearRole::kQ, -1, false, q_dim, hidden},
                                  {p + "k_proj", LinearRole::kK, -1, false, kv_dim, hidden},
                                  {p + "v_proj", LinearRole::kV, -1, false, kv_dim, hidden},
                                  {p + "o_proj", LinearRole::kO, -1, false, hidden, q_dim}};
  auto mlp = [&](int64_t expert, bool shared, int64_t inter) {
    const MlpNames n = mlp_names(c, layer, shared ? -1 : std::max<int64_t>(expert, 0));
    out.push_back({n.gate, LinearRole::kGate, expert, shared, inter, hidden});
    out.push_back({n.up, LinearRole::kUp, expert, shared, inter, hidden});
    out.push_back({n.down, LinearRole::kDown, expert, shared, hidden, inter});
  };
  if (!is_moe_layer(c, layer)) {
    mlp(-1, false, c.intermediate_size);
    return out;
  }
  for (int64_t e = 0; e < c.moe.n_experts; ++e) mlp(e, false, c.moe.expert_intermediate);
  if (c.moe.shared_intermediate > 0) mlp(-1, true, c.moe.shared_intermediate);
  return out;
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size;
  std::vector<TensorSpec> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab_size, hidden}});
  // A linear of layer_linears with its bias where the family has one (experts never do).
  auto linear = [&](const LayerLinear& l) {
    t.push_back({l.name + ".weight", {l.out, l.in}, true});
    bool bias = l.expert < 0 && !l.shared && c.mlp_bias;  // the dense MLP's
    if (l.role <= LinearRole::kV) bias = c.qkv_bias;
    if (l.role == LinearRole::kO) bias = c.o_bias;
    if (bias) t.push_back({l.name + ".bias", {l.out}});
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::vector<LayerLinear> linears = layer_linears(c, i);
    t.push_back({p + "input_layernorm.weight", {hidden}});
    for (size_t j = 0; j < 4; ++j) linear(linears[j]);  // q, k, v, o
    if (c.qk_norm) {
      t.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      t.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    t.push_back({p + "post_attention_layernorm.weight", {hidden}});
    const bool moe = is_moe_layer(c, i);
    if (moe) {
      t.push_back({router_name(c, i) + ".weight", {c.moe.n_experts, hidden}});
      if (c.moe.fused_experts) {
        const int64_t inter = c.moe.expert_intermediate;
        t.push_back({p + "mlp.experts.gate_up_proj", {c.moe.n_experts, 2 * inter, hidden}});
        t.push_back({p + "mlp.experts.down_proj", {c.moe.n_experts, hidden, inter}});
      }
    }
    for (size_t j = 4; j < linears.size(); ++j) {
      if (linears[j].expert < 0 || !c.moe.fused_experts) linear(linears[j]);
    }
    if (moe && c.moe.shared_intermediate > 0) {
      t.push_back({shared_gate_name(c, i) + ".weight", {1, hidden}});
    }
  }
  t.push_back({"model.norm.weight", {hidden}});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, hidden}, true});
  return t;
}

namespace {

// (all parameters, those of routed experts)
std::pair<int64_t, int64_t> count_parameters(const ModelConfig& c) {
  int64_t all = 0, routed = 0;
  for (const TensorSpec& t : expected_tensors(c)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    all += n;
    // Per-expert ("mlp.experts.3.up_proj", "block_sparse_moe.experts.3.w3") and fused
    // ("mlp.experts.gate_up_proj") names; the shared expert is "shared_expert.".
    if (t.name.find(".experts.") != std::string::npos) routed += n;
  }
  return {all, routed};
}

}  // namespace

int64_t parameter_count(const ModelConfig& config) {
  return count_parameters(config).first;
}

int64_t active_parameter_count(const ModelConfig& config) {
  const auto [all, routed] = count_parameters(config);
  if (config.moe.n_experts == 0) return all;
  // Each MoE layer holds n_experts equal experts, so routed / n_experts is exact.
  return all - routed + routed / config.moe.n_experts * config.moe.top_k;
}

}  // namespace qs::models
