// diffusion: WanTransformer3DModel (diffusers' transformer_wan.py), the video DiT of Wan2.1 and
// Wan2.2 (T2V-A14B's two experts, TI2V-5B, I2V-A14B): latents cut into 3-D patches, each block
// self-attention over every patch token (3-D RoPE, q/k RMSNorm across heads), cross-attention
// to the UMT5 text and a GELU MLP, modulated by AdaLN from the timestep (one per item, or one
// per token for Wan2.2 TI2V's expand_timesteps). Names no weight format: every matmul is an
// ops::linear with m = batch x tokens, so a CFG batch of two reads the weights once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/dit_common.h"
#include "models/component.h"
#include "models/model_config.h"

namespace qs::diffusion {

// transformer/config.json. Wan2.1's CLIP image conditioning (image_dim, added_kv_proj_dim,
// pos_embed_seq_len) is refused at load: Wan2.2's image-to-video conditions through the
// latent channels instead.
struct WanTransformerConfig {
  std::vector<int64_t> patch_size = {1, 2, 2};  // t, h, w
  int64_t num_attention_heads = 40;
  int64_t attention_head_dim = 128;
  int64_t in_channels = 16;
  int64_t out_channels = 16;
  int64_t text_dim = 4096;  // UMT5 hidden size
  int64_t freq_dim = 256;   // sinusoidal timestep channels
  int64_t ffn_dim = 13824;
  int64_t num_layers = 40;
  bool cross_attn_norm = true;      // norm2 before cross-attention (LayerNorm with affine)
  float eps = 1e-6f;                // every LayerNorm and RMSNorm
  int64_t rope_max_seq_len = 1024;  // longest patch grid along any axis
  int64_t inner_dim() const { return attention_head_dim * num_attention_heads; }
  int64_t patch_volume() const { return patch_size[0] * patch_size[1] * patch_size[2]; }
  // WanRotaryPosEmbed's split of head_dim into frame, height and width parts.
  std::vector<int64_t> rope_axes() const;
};

// One forward's inputs, as WanPipeline / WanImageToVideoPipeline pass them (f32, row-major).
struct WanInputs {
  int64_t batch = 1;
  int64_t frames = 0, height = 0, width = 0;  // latent grid
  const float* latents = nullptr;             // [batch, in_channels, frames, height, width]
  const float* timestep = nullptr;            // [batch], or [batch, seq] when per_token
  // Wan2.2 TI2V's expand_timesteps: one timestep per patch token,
  // seq = (frames / pt) * (height / ph) * (width / pw).
  bool per_token_timestep = false;
  int64_t n_text = 0;
  const float* text = nullptr;  // [batch, n_text, text_dim]
};

struct WanBlock {
  std::vector<float> scale_shift_table;  // [6, inner]: shift, scale, gate (attn); (ffn)
  Dense q, k, v, out;                    // attn1: [inner, inner]
  std::vector<float> norm_q, norm_k;     // attn1: [inner], RMSNorm across heads
  Dense q2, k2, v2, out2;                // attn2 (cross): [inner, inner]
  std::vector<float> norm_q2, norm_k2;   // attn2: [inner]
  std::vector<float> norm2_w, norm2_b;   // [inner], when cross_attn_norm
  Dense ffn_in, ffn_out;                 // [ffn_dim, inner], [inner, ffn_dim]
};

// A window into forward() for calibration (quant/wan_tuner's AutoRound of Wan blocks, which
// needs each block's inputs and the conditioning the blocks share); inference sets none.
struct WanBlockTap {
  // The conditioning of one forward, as every block reads it (views valid during the call):
  //   timestep_proj [n_distinct, 6 inner]: time_proj(SiLU(temb)) per distinct timestep;
  //   mod_index [batch * seq]: the timestep_proj row of each token;
  //   text [batch * n_text, inner]: condition_embedder's text_embedder output;
  //   cos, sin [seq, head_dim / 2]: the 3-D rope tables (shared by the batch items).
  struct Conditioning {
    int64_t batch = 0, seq = 0, n_text = 0, n_distinct = 0;
    const float* timestep_proj = nullptr;
    const int64_t* mod_index = nullptr;
    const float* text = nullptr;
    const float* cos = nullptr;
    const float* sin = nullptr;
  };
  // Called once per forward before the blocks.
  std::function<Status(const Conditioning&)> conditioning;
  // Called before block `index` with its input x [batch * seq, inner], and once more with
  // index = num_layers with the last block's output. A non-ok status ends the forward with it.
  std::function<Status(int64_t index, const float* x)> block_input;
};

class WanTransformer {
 public:
  static Result<WanTransformer> load(const std::string& dir);

  const WanTransformerConfig& config() const { return config_; }

  // out: [batch, out_channels, frames, height, width], the predicted flow.
  Status forward(const WanInputs& in, float* out, ThreadPool& pool) const;

  // Every later forward() reports to `tap` (nullptr: none) until it is reset; the caller keeps
  // it alive and runs no forwards concurrently meanwhile. Const because a pipeline hands out its
  // transformers const: the tap observes, it changes no result.
  void set_tap(const WanBlockTap* tap) const { tap_ = tap; }

 private:
  mutable const WanBlockTap* tap_ = nullptr;
  WanTransformerConfig config_;
  models::Component weights_;  // keeps the mapped files alive
  // The Conv3d with kernel = stride = patch as a linear over flattened patches:
  // [inner, in_channels * pt * ph * pw], a view of the stored [inner, C, pt, ph, pw].
  Dense patch_embedding_;
  MlpEmbedder time_embedder_;  // linear_1 -> SiLU -> linear_2: [inner, freq_dim]
  Dense time_proj_;            // [6 inner, inner], on SiLU(temb)
  MlpEmbedder text_embedder_;  // linear_1 -> GELU(tanh) -> linear_2: [inner, text_dim]
  std::vector<WanBlock> blocks_;
  std::vector<float> scale_shift_table_;  // [2, inner]: shift, scale of the head
  Dense proj_out_;                        // [out_channels * pt * ph * pw, inner]
};

// Reads and checks transformer/config.json.
Result<WanTransformerConfig> read_wan_transformer_config(const models::Component& c);

// Every tensor WanTransformer::load reads, with its shape, in diffusers' names (`linear`: the
// nn.Linear weights, which a quantized checkpoint may store packed).
std::vector<models::TensorSpec> wan_transformer_tensor_specs(const WanTransformerConfig& config);

// Bytes of the buffers one forward allocates for `batch` items of `seq` patch tokens and
// `n_text` text tokens on `threads` threads: the f32 activations forward() keeps (kept in step
// with it by hand), the per-call attention scratch and the largest per-call activation buffer
// of the linear kernels.
size_t wan_transformer_activation_bytes(const WanTransformerConfig& config, int64_t batch,
                                        int64_t seq, int64_t n_text, int threads);

}  // namespace qs::diffusion
