// models: the multimodal towers' tensor lists (see tower_tensors.h). The field defaults are
// those of vision::Qwen25VisionConfig and audio::OmniAudioConfig, so a config that leaves a
// field out describes the same tower here and at load.
#include "models/tower_tensors.h"

#include <string>

#include "core/limits.h"
#include "models/families.h"

namespace qs::models {

namespace {

Result<int64_t> tower_field(const nlohmann::json& config, const char* section, const char* key,
                            int64_t fallback) {
  QS_ASSIGN_OR_RETURN(auto v, json_int(config, key));
  const int64_t value = v.value_or(fallback);
  if (value < 1 || value > limits::kMaxHiddenDim) {
    return invalid_argument(std::string(section) + " field '" + key + "' must be 1 to " +
                            std::to_string(limits::kMaxHiddenDim) + ", got " +
                            std::to_string(value));
  }
  return value;
}

void push_tower_linear(std::vector<TensorSpec>* t, const std::string& module, int64_t out,
                       int64_t in, bool bias) {
  t->push_back({module + ".weight", {out, in}, true});
  if (bias) t->push_back({module + ".bias", {out}});
}

}  // namespace

Result<std::vector<TensorSpec>> vision_tower_tensors(const nlohmann::json& v, VisionQkv qkv) {
  if (!v.is_object()) return invalid_argument("vision_config must be an object");
  const char* s = "vision_config";
  QS_ASSIGN_OR_RETURN(const int64_t depth, tower_field(v, s, "depth", 32));
  QS_ASSIGN_OR_RETURN(const int64_t d, tower_field(v, s, "hidden_size", 1280));
  QS_ASSIGN_OR_RETURN(const int64_t ff, tower_field(v, s, "intermediate_size", 3420));
  QS_ASSIGN_OR_RETURN(const int64_t out, tower_field(v, s, "out_hidden_size", 3584));
  QS_ASSIGN_OR_RETURN(const int64_t channels, tower_field(v, s, "in_channels", 3));
  QS_ASSIGN_OR_RETURN(const int64_t patch, tower_field(v, s, "patch_size", 14));
  QS_ASSIGN_OR_RETURN(const int64_t temporal, tower_field(v, s, "temporal_patch_size", 2));
  QS_ASSIGN_OR_RETURN(const int64_t merge, tower_field(v, s, "spatial_merge_size", 2));
  QS_RETURN_IF_ERROR(limits::check_at_most(depth, limits::kMaxLayers, "vision_config depth"));
  std::vector<TensorSpec> t;
  t.push_back({"visual.patch_embed.proj.weight", {d, channels, temporal, patch, patch}});
  for (int64_t i = 0; i < depth; ++i) {
    const std::string p = "visual.blocks." + std::to_string(i) + ".";
    t.push_back({p + "norm1.weight", {d}});
    t.push_back({p + "norm2.weight", {d}});
    if (qkv == VisionQkv::kFused) {
      push_tower_linear(&t, p + "attn.qkv", 3 * d, d, true);
    } else {
      for (const char* n : {"attn.q", "attn.k", "attn.v"}) push_tower_linear(&t, p + n, d, d, true);
    }
    push_tower_linear(&t, p + "attn.proj", d, d, true);
    push_tower_linear(&t, p + "mlp.gate_proj", ff, d, true);
    push_tower_linear(&t, p + "mlp.up_proj", ff, d, true);
    push_tower_linear(&t, p + "mlp.down_proj", d, ff, true);
  }
  const int64_t merged = d * merge * merge;
  t.push_back({"visual.merger.ln_q.weight", {d}});
  push_tower_linear(&t, "visual.merger.mlp.0", merged, merged, true);
  push_tower_linear(&t, "visual.merger.mlp.2", out, merged, true);
  return t;
}

Result<std::vector<TensorSpec>> audio_tower_tensors(const nlohmann::json& a) {
  if (!a.is_object()) return invalid_argument("audio_config must be an object");
  const char* s = "audio_config";
  QS_ASSIGN_OR_RETURN(const int64_t mels, tower_field(a, s, "num_mel_bins", 128));
  QS_ASSIGN_OR_RETURN(const int64_t d, tower_field(a, s, "d_model", 1280));
  QS_ASSIGN_OR_RETURN(const int64_t layers, tower_field(a, s, "encoder_layers", 32));
  QS_ASSIGN_OR_RETURN(const int64_t ff, tower_field(a, s, "encoder_ffn_dim", 5120));
  QS_ASSIGN_OR_RETURN(const int64_t out, tower_field(a, s, "output_dim", 3584));
  QS_RETURN_IF_ERROR(limits::check_at_most(layers, limits::kMaxLayers, "audio_config layers"));
  const std::string p = "audio_tower.";
  std::vector<TensorSpec> t;
  t.push_back({p + "conv1.weight", {d, mels, 3}});
  t.push_back({p + "conv1.bias", {d}});
  t.push_back({p + "conv2.weight", {d, d, 3}});
  t.push_back({p + "conv2.bias", {d}});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string l = p + "layers." + std::to_string(i) + ".";
    t.push_back({l + "self_attn_layer_norm.weight", {d}});
    t.push_back({l + "self_attn_layer_norm.bias", {d}});
    push_tower_linear(&t, l + "self_attn.q_proj", d, d, true);
    push_tower_linear(&t, l + "self_attn.k_proj", d, d, false);  // Whisper's k_proj has no bias
    push_tower_linear(&t, l + "self_attn.v_proj", d, d, true);
    push_tower_linear(&t, l + "self_attn.out_proj", d, d, true);
    t.push_back({l + "final_layer_norm.weight", {d}});
    t.push_back({l + "final_layer_norm.bias", {d}});
    push_tower_linear(&t, l + "fc1", ff, d, true);
    push_tower_linear(&t, l + "fc2", d, ff, true);
  }
  t.push_back({p + "ln_post.weight", {d}});
  t.push_back({p + "ln_post.bias", {d}});
  push_tower_linear(&t, p + "proj", out, d, true);
  t.push_back({p + "audio_bos_eos_token.weight", {2, out}});
  return t;
}

Result<std::vector<TensorSpec>> tower_tensors(const nlohmann::json& config,
                                              const ModelConfig& parsed) {
  std::vector<TensorSpec> t;
  if (auto v = config.find("vision_config"); v != config.end() && !v->is_null()) {
    const VisionQkv qkv =
        parsed.family == Family::kQwen2_5_OmniThinker ? VisionQkv::kSeparate : VisionQkv::kFused;
    QS_ASSIGN_OR_RETURN(t, vision_tower_tensors(*v, qkv));
  }
  if (auto a = config.find("audio_config"); a != config.end() && !a->is_null()) {
    QS_ASSIGN_OR_RETURN(std::vector<TensorSpec> audio, audio_tower_tensors(*a));
    t.insert(t.end(), audio.begin(), audio.end());
  }
  return t;
}

}  // namespace qs::models
