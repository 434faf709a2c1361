// diffusion: what a pipeline directory needs in memory to generate one image, for `inspect`:
// each component's parameters and resident bytes (what load makes resident: 16-bit weights
// as mapped views, quantized linears repacked, biases / norms / convolution kernels widened to
// f32), and the transformer's activation buffers for one step at a given size. The
// transformer is sized from its config.json alone (flux_tensor_specs and its
// quantization_config), so FLUX.1-dev's shapes can be inspected without its 23 GB of weights;
// the other components are sized from their weight files and counted only when present.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::diffusion {

struct ComponentMemory {
  std::string name;     // "transformer", "text_encoder_2", ...
  std::string source;   // "config.json", "weights", "absent"
  std::string scheme;   // "bf16", "W4A16 auto-round int4 g128 sym (block linears)", ...
  int64_t params = 0;   // logical parameters (a quantized weight counts n x k)
  size_t resident = 0;  // bytes
  size_t as_bf16 = 0;   // the same parameters at 2 bytes each
  int64_t quantized_linears = 0, linears = 0;
};

struct PipelineMemory {
  std::vector<ComponentMemory> components;
  int64_t width = 0, height = 0, n_img = 0, n_txt = 0;
  size_t activations_batch1 = 0;  // one transformer forward, one image
  size_t activations_batch2 = 0;  // true CFG's batched forward
  size_t weights() const;
  // Resident weights plus one batch-1 forward's activations (batch 2 with true CFG).
  size_t peak(bool true_cfg) const;
};

// `dir` is a pipeline directory (model_index.json) or a transformer/ folder on its own.
Result<PipelineMemory> pipeline_memory(const std::string& dir, int64_t width, int64_t height,
                                       int64_t max_sequence_length, int threads);

std::string pipeline_memory_text(const PipelineMemory& m);
nlohmann::json pipeline_memory_json(const PipelineMemory& m);

}  // namespace qs::diffusion
