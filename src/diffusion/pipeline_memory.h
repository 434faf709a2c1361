// diffusion: what a pipeline directory needs in memory to generate one image or video, for
// `inspect`: each component's parameters and resident bytes (what load makes resident: 16-bit
// weights as mapped views, quantized linears repacked, biases / norms / convolution kernels
// widened to f32), and the activations of one denoising step at a given size (and for Wan, the
// VAE decode's working set). Every component is sized from its config.json (flux_tensor_specs,
// wan_transformer_tensor_specs, component_specs.h; the quantization_config for quantized
// linears), the weight files' headers giving the stored dtypes when they are there: FLUX.1-dev
// and Wan2.2 can be inspected without their weights. FLUX's text encoders and VAE are the
// exception: sized from their weight files and counted only when present.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "diffusion/pipeline_index.h"
#include "diffusion/pipeline_registry.h"

namespace qs::diffusion {

struct ComponentMemory {
  std::string name;     // "transformer", "text_encoder_2", ...
  std::string source;   // "config.json", "config.json + weight headers", "weights", "absent"
  std::string scheme;   // "16-bit", "auto-round (...) int4 g128 sym, ...", "f32", ...
  int64_t params = 0;   // logical parameters (a quantized weight counts n x k)
  size_t resident = 0;  // bytes
  size_t as_bf16 = 0;   // the same parameters at 2 bytes each
  int64_t quantized_linears = 0, linears = 0;
};

struct PipelineMemory {
  const PipelineFamilySpec* family = nullptr;  // its output picks the text and JSON layout
  std::string class_name;  // model_index.json's ("" for a FLUX transformer/ folder alone)
  std::vector<ComponentMemory> components;
  int64_t width = 0, height = 0;
  int64_t n_img = 0;  // the transformer's image (FLUX) or video (Wan: patch) tokens
  int64_t n_txt = 0;
  // One transformer forward: FLUX one image / true CFG's batch of 2; Wan one branch / CFG's
  // two branches batched (Wan runs CFG at its default guidance 5).
  size_t activations_batch1 = 0;
  size_t activations_batch2 = 0;
  // Wan: frames, the latent grid [z_dim, frames, h, w] and the VAE decode's working set
  // (wan_vae_decode_peak_bytes: one latent frame's activations, the frame caches and the
  // decoded video as f32).
  int64_t frames = 0;
  std::vector<int64_t> latent_shape;
  size_t vae_decode = 0;

  size_t weights() const;
  // Resident weights plus one batch-1 forward's activations (batch 2 with true CFG / CFG).
  size_t peak(bool true_cfg) const;
  size_t decode_peak() const { return weights() + vae_decode; }
};

// `dir` is a pipeline directory (model_index.json of a registered family, whose `memory` sizes
// it) or a FLUX transformer/ folder on its own. `num_frames` sizes a video pipeline (4k + 1);
// image pipelines ignore it. A zero size or frame count is the family's default.
Result<PipelineMemory> pipeline_memory(const std::string& dir, const MemoryQuery& query);
Result<PipelineMemory> pipeline_memory(const std::string& dir, int64_t width, int64_t height,
                                       int64_t max_sequence_length, int threads,
                                       int64_t num_frames = 81);

// The registry's sizers of FLUX.1 and Wan2.2 pipeline directories.
Result<PipelineMemory> flux_pipeline_memory(const PipelineIndex& index, const MemoryQuery& query);
Result<PipelineMemory> wan_pipeline_memory(const PipelineIndex& index, const MemoryQuery& query);

std::string pipeline_memory_text(const PipelineMemory& m);
nlohmann::json pipeline_memory_json(const PipelineMemory& m);

}  // namespace qs::diffusion
