// models: the hyper-parameters of a decoder-only checkpoint, read from its config.json, and
// the declarative list of tensors such a checkpoint must hold. The list is the one truth used
// by the loader (validation) and by `quantserve make-model` (random checkpoints at real
// shapes). Family quirks (Qwen2 q/k/v bias, Qwen3 q/k-norm, Mistral sliding window, the
// Mixture-of-Experts MLP of Qwen2-MoE / Qwen3-MoE / Mixtral) are fields here, set by each
// family's parser (llama.cc, qwen2.cc, qwen3.cc, moe_families.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::models {

enum class Family {
  kLlama,
  kMistral,
  kQwen2,
  kQwen3,
  kQwen2Moe,
  kQwen3Moe,
  kMixtral,
  kQwen2_5_VL,
  kQwen2_5_OmniThinker
};

// How a checkpoint names an MoE layer's router and experts (transformers' per-expert layout):
//   kQwen:    mlp.gate.weight, mlp.experts.E.{gate,up,down}_proj.weight
//             (+ mlp.shared_expert.{gate,up,down}_proj, mlp.shared_expert_gate for Qwen2-MoE)
//   kMixtral: block_sparse_moe.gate.weight, block_sparse_moe.experts.E.{w1,w3,w2}.weight
//             (w1 = gate, w3 = up, w2 = down)
enum class ExpertNaming { kQwen, kMixtral };

// The sparse MLP of the MoE layers. The router is a [n_experts, hidden] matmul in f32; softmax
// over experts, the top_k largest kept (renormalised to sum 1 when norm_topk_prob), and each
// chosen expert's SwiGLU output weighted by its probability.
struct MoeConfig {
  int64_t n_experts = 0;  // 0: a dense model
  int64_t top_k = 0;
  int64_t expert_intermediate = 0;  // moe_intermediate_size (Mixtral: intermediate_size)
  int64_t shared_intermediate = 0;  // Qwen2-MoE's always-on shared expert; 0: none
  bool norm_topk_prob = false;
  ExpertNaming naming = ExpertNaming::kQwen;
  // The checkpoint holds each MoE layer's experts fused, as transformers 5 keeps them in
  // memory: mlp.experts.gate_up_proj [E, 2I, H] (each expert's gate rows, then its up rows)
  // and mlp.experts.down_proj [E, H, I], 16-bit. Not a config.json key: Model::load sets it
  // when the checkpoint has those tensors.
  bool fused_experts = false;
};

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

// A part of the checkpoint stored beside the model and not run here (a full Qwen2.5-Omni's
// talker and token2wav, which make speech from the thinker's output).
struct SkippedPart {
  std::string name;       // "talker"
  std::string prefix;     // its tensors' prefix, "talker."
  int64_t n_tensors = 0;  // what Model::load found under the prefix (0 before loading)
  uint64_t n_bytes = 0;   // their stored bytes
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
  MoeConfig moe;
  // Per layer: whether its MLP is the sparse MoE one (decoder_sparse_step, mlp_only_layers);
  // empty or all false for dense models. [n_layers]
  std::vector<bool> moe_layer;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  // Multimodal RoPE (Qwen2-VL, Qwen2.5-VL, Qwen2.5-Omni): the head_dim / 2 rotary frequencies
  // split, in order, into temporal, height and width sections, each turned by that axis of a
  // token's 3-D position (text tokens have the same position on all three). Empty: 1-D RoPE.
  std::vector<int64_t> mrope_section;
  // Multimodal checkpoints: the prompt's placeholder ids (-1: none), and the prefixes of the
  // towers' tensors (visual., audio_tower.), which the decoder leaves to the towers.
  int32_t image_token_id = -1, video_token_id = -1, audio_token_id = -1;
  int32_t vision_start_token_id = -1, vision_end_token_id = -1;
  std::vector<std::string> tower_prefixes;
  // vision_config's spatial_merge_size (patches per merged token along each side) and
  // tokens_per_second (the temporal position step of one second of video).
  int64_t vision_merge_size = 0;
  double vision_tokens_per_second = 0;
  // Qwen2.5-Omni's thinker (TMRoPE, mrope.h): the temporal position ticks of one second of
  // video, the seconds of one chunk when a video's placeholders interleave with its sound
  // track's, and the ids around an audio clip (<|audio_bos|>, <|audio_eos|>; -1: none).
  double position_id_per_seconds = 0;
  double seconds_per_chunk = 0;
  int32_t audio_start_token_id = -1, audio_end_token_id = -1;
  // A model kept inside a larger checkpoint (models/model_root.h): the thinker of a full
  // Qwen2.5-Omni, whose config is config.json's thinker_config (`architecture` is then the
  // thinker's) and whose tensors are stored under `tensor_prefix` ("thinker."); the
  // checkpoint's own architecture ("Qwen2_5OmniModel"); and the parts beside it that are not
  // run (talker, token2wav). All empty when the checkpoint is the model.
  std::string tensor_prefix;
  std::string container_architecture;
  std::vector<SkippedPart> skipped_parts;
};

// Parses a config.json object. Unknown architectures are an error that names them and lists
// the supported ones; missing or inconsistent fields are errors naming the field. A full
// Qwen2.5-Omni config parses as its thinker (thinker_config), with tensor_prefix "thinker.".
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
  // A matmul weight that quantized checkpoints may store packed (the q/k/v/o and MLP
  // projections, the experts, lm_head). The MoE router and Qwen2-MoE's shared-expert gate are
  // not: the tools keep them 16-bit and the engine runs them in f32.
  bool linear = false;
};

// The module names of layer `layer`'s MLP weights: for a dense layer its gate/up/down
// projections; for an MoE layer expert e's (e in [0, n_experts)), or the shared expert's
// (e = -1). Without the ".weight" suffix.
inline bool is_moe_layer(const ModelConfig& config, int64_t layer) {
  return layer < static_cast<int64_t>(config.moe_layer.size()) && config.moe_layer[layer];
}

struct MlpNames {
  std::string gate, up, down;
};
MlpNames mlp_names(const ModelConfig& config, int64_t layer, int64_t expert);
// The router ("...mlp.gate") and, for Qwen2-MoE, the shared-expert gate of an MoE layer.
std::string router_name(const ModelConfig& config, int64_t layer);
std::string shared_gate_name(const ModelConfig& config, int64_t layer);

// One matmul of a decoder layer. layer_linears() lists a layer's in the one order every walk of
// a layer uses (the loader and Model::linears(), the quantizer's differentiable block and its
// export): q, k, v, o; then the dense MLP's gate, up, down, or each routed expert's
// (0..n_experts-1) followed by the shared expert's. The router and the shared-expert gate are
// not listed: they are never quantized (TensorSpec::linear).
enum class LinearRole : uint8_t { kQ, kK, kV, kO, kGate, kUp, kDown };
struct LayerLinear {
  std::string name;  // "model.layers.3.mlp.experts.7.gate_proj" (no ".weight")
  LinearRole role = LinearRole::kQ;
  int64_t expert = -1;  // the routed expert; -1: attention, the dense MLP or the shared expert
  bool shared = false;  // Qwen2-MoE's shared expert
  int64_t out = 0, in = 0;
};
std::vector<LayerLinear> layer_linears(const ModelConfig& config, int64_t layer);

// Parameters of the tensor list (every expert counted), and those one token runs through: the
// routed experts at top_k of n_experts (the "active" count model cards give, e.g. 3.3B of
// Qwen3-30B-A3B's 30.5B). Equal for dense models.
int64_t parameter_count(const ModelConfig& config);
int64_t active_parameter_count(const ModelConfig& config);

// Every tensor a checkpoint of `config` must hold, in a stable order (embedding, layers, final
// norm, lm_head unless tied).
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

}  // namespace qs::models
