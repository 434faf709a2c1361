// models: the tensor lists of the multimodal towers beside a decoder, read from a config's
// vision_config / audio_config with the defaults the towers' loaders use (transformers' 7B
// shapes): Qwen2.5-VL's vision tower (fused qkv) and Qwen2.5-Omni's (q, k, v apart), and
// Qwen2.5-Omni's audio tower. `make-model` writes them and `inspect` sizes them; the towers
// themselves (vision/, audio/) read the same names.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "models/model_config.h"

namespace qs::models {

// How a vision tower stores its attention input projection: Qwen2.5-VL one `attn.qkv`
// [3 * hidden, hidden], the Omni thinker `attn.q`, `attn.k`, `attn.v` [hidden, hidden] each.
enum class VisionQkv { kFused, kSeparate };

// visual.* of a Qwen2.5-VL / Qwen2.5-Omni vision tower: the patch embedding (a conv3d kernel
// [hidden, 3, temporal, patch, patch]), `depth` pre-RMSNorm blocks with biased linears, and
// the 2 x 2 merger. Matmul weights are marked TensorSpec::linear.
Result<std::vector<TensorSpec>> vision_tower_tensors(const nlohmann::json& vision_config,
                                                     VisionQkv qkv);

// audio_tower.* of Qwen2.5-Omni's thinker: two conv1d kernels [d, mels, 3] and [d, d, 3],
// Whisper encoder layers (k_proj without a bias), ln_post, the projection to output_dim and
// the (unused by transformers' forward, but stored) audio_bos_eos_token [2, output_dim].
Result<std::vector<TensorSpec>> audio_tower_tensors(const nlohmann::json& audio_config);

// The towers a decoder config names: the vision tower when it has a vision_config (fused qkv
// for Qwen2.5-VL, separate for the Omni thinker), then the audio tower when it has an
// audio_config. Empty for a text model.
Result<std::vector<TensorSpec>> tower_tensors(const nlohmann::json& config,
                                              const ModelConfig& parsed);

}  // namespace qs::models
