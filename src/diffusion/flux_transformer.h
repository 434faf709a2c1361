// diffusion: FluxTransformer2DModel (diffusers' transformer_flux.py), the MMDiT of FLUX.1:
// text and image tokens in double-stream blocks (separate weights, one joint attention),
// then single-stream blocks over the concatenated sequence (attention and MLP in parallel),
// each modulated by AdaLN-Zero from the timestep / guidance / pooled-text embedding; 3-axis
// RoPE from the token ids, RMSNorm on q and k. Names no weight format: every matmul is an
// ops::linear with m = batch x tokens, so a batch of two (true CFG) reads the weights once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/dit_common.h"
#include "models/component.h"

namespace qs::diffusion {

// transformer/config.json
struct FluxConfig {
  int64_t patch_size = 1;
  int64_t in_channels = 64;
  int64_t out_channels = 64;
  int64_t num_layers = 19;         // double-stream blocks
  int64_t num_single_layers = 38;  // single-stream blocks
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 4096;   // T5 hidden size
  int64_t pooled_projection_dim = 768;  // CLIP pooled size
  bool guidance_embeds = true;          // dev: true, schnell: false
  std::vector<int64_t> axes_dims_rope = {16, 56, 56};
  int64_t inner_dim() const { return attention_head_dim * num_attention_heads; }
};

struct FluxAttentionWeights {
  Dense q, k, v;                              // [inner, inner]
  std::vector<float> norm_q, norm_k;          // [head_dim]
  Dense add_q, add_k, add_v;                  // double blocks: the text stream's projections
  std::vector<float> norm_add_q, norm_add_k;  // [head_dim]
  Dense out, add_out;                         // double blocks: [inner, inner]
};

struct FluxDoubleBlock {
  Dense norm1,
      norm1_context;  // [6 inner, inner]: shift, scale, gate (attn); shift, scale, gate (mlp)
  FluxAttentionWeights attn;
  Dense ff_in, ff_out;          // [4 inner, inner], [inner, 4 inner]
  Dense ff_ctx_in, ff_ctx_out;  // the text stream's
};

struct FluxSingleBlock {
  Dense norm;                 // [3 inner, inner]: shift, scale, gate
  FluxAttentionWeights attn;  // q, k, v and norms only
  Dense proj_mlp;             // [4 inner, inner]
  Dense proj_out;             // [inner, 5 inner]
};

// One forward's inputs, as FluxPipeline passes them (all f32, row-major).
struct FluxInputs {
  int64_t batch = 1;
  int64_t n_img = 0, n_txt = 0;
  const float* img = nullptr;       // [batch, n_img, in_channels * patch^2] packed latents
  const float* txt = nullptr;       // [batch, n_txt, joint_attention_dim]
  const float* pooled = nullptr;    // [batch, pooled_projection_dim]
  const float* timestep = nullptr;  // [batch], sigma (the pipeline's t / 1000)
  const float* guidance = nullptr;  // [batch] guidance scale; required iff guidance_embeds
  const float* img_ids = nullptr;   // [n_img, 3]
  const float* txt_ids = nullptr;   // [n_txt, 3]
};

class FluxTransformer {
 public:
  static Result<FluxTransformer> load(const std::string& dir);

  const FluxConfig& config() const { return config_; }

  // out: [batch, n_img, out_channels * patch^2], the predicted velocity.
  Status forward(const FluxInputs& in, float* out, ThreadPool& pool) const;

 private:
  FluxConfig config_;
  models::Component weights_;  // keeps the mapped files alive
  Dense x_embedder_, context_embedder_;
  MlpEmbedder time_embed_, guidance_embed_, text_embed_;  // linear_1 -> SiLU -> linear_2
  std::vector<FluxDoubleBlock> double_blocks_;
  std::vector<FluxSingleBlock> single_blocks_;
  Dense norm_out_, proj_out_;  // norm_out_: [2 inner, inner]: scale, shift
};

// Reads and checks transformer/config.json.
Result<FluxConfig> read_flux_config(const models::Component& c);

// Every tensor FluxTransformer::load reads, with its shape, in diffusers' names: what a
// transformer of `config` holds (inspect sizes one from its config alone; the benches write
// random ones; a test holds it to the fixture's checkpoint).
struct FluxTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<FluxTensorSpec> flux_tensor_specs(const FluxConfig& config);

// Bytes of the buffers one forward allocates for `batch` items of n_img + n_txt tokens on
// `threads` threads: the f32 activations forward() keeps (kept in step with it by hand), the
// per-call attention scratch and the largest per-call activation buffer of the linear kernels.
size_t flux_activation_bytes(const FluxConfig& config, int64_t batch, int64_t n_img, int64_t n_txt,
                             int threads);

}  // namespace qs::diffusion
