// apps: `inspect`'s memory table of a multimodal model from its config.json alone (no weights
// needed): Qwen2.5-VL (decoder, vision tower), Qwen2.5-Omni's thinker (decoder, vision and
// audio towers) and the whole Qwen2.5-Omni (Qwen2_5OmniModel: the thinker's three parts, the
// talker and token2wav). Each part's parameters and resident bytes in bf16 and in W4A16 as
// AutoRound exports Qwen2.5-Omni and Qwen2.5-VL: the decoder's block linears int4 group 128,
// the towers, embeddings, lm_head and the speech parts 16-bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::apps {

struct PartMemory {
  std::string name;       // "thinker decoder", "vision tower", "audio tower", "talker", ...
  bool runs_here = true;  // false: quantserve does not run it (talker, token2wav)
  int64_t params = 0;     // logical parameters (a quantized weight counts n x k)
  // Resident bytes as the loaders hold the part: 16-bit matmul weights and embeddings as views
  // of the file, norms, biases and convolution kernels widened to f32, the audio tower's
  // sinusoid table (computed, not stored). A part quantserve does not run is its bf16 bytes.
  uint64_t bf16_bytes = 0;
  uint64_t w4a16_bytes = 0;  // the same with the decoder blocks' linears int4 g128 resident
  int64_t linears = 0, quantized_linears = 0;  // quantized: in the W4A16 form
};

struct MultimodalMemory {
  std::string architecture;  // config.json's
  std::vector<PartMemory> parts;
};

// True for the architectures multimodal_memory() sizes.
bool is_multimodal_architecture(const nlohmann::json& config);

// The parts of the model `config` (a config.json object) describes; errors name the part and
// field that is missing or out of range.
Result<MultimodalMemory> multimodal_memory(const nlohmann::json& config);

std::string multimodal_memory_text(const MultimodalMemory& m);
nlohmann::json multimodal_memory_json(const MultimodalMemory& m);

}  // namespace qs::apps
