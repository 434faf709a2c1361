// diffusion: diffusers' AutoencoderKL (the VAE of Stable Diffusion and FLUX.1): the decoder
// that turns latents into an image and the encoder that turns an image into its latent
// distribution's mean. ResNet blocks of GroupNorm / SiLU / 3x3 convolutions, one
// single-head self-attention in the middle, nearest-2x upsampling (decoder) and stride-2
// convolutions (encoder) between levels. NCHW f32 throughout; images in [-1, 1].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/component.h"
#include "ops/linear.h"

namespace qs::diffusion {

// vae/config.json
struct VaeConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  int64_t latent_channels = 16;
  std::vector<int64_t> block_out_channels = {128, 256, 512, 512};
  int64_t layers_per_block = 2;
  int64_t norm_num_groups = 32;
  bool mid_block_add_attention = true;
  bool use_quant_conv = false;
  bool use_post_quant_conv = false;
  double scaling_factor = 0.3611;  // FLUX.1's
  double shift_factor = 0.1159;
  // 2^(levels - 1): image pixels per latent pixel along each side.
  int64_t scale() const { return int64_t{1} << (block_out_channels.size() - 1); }
};

struct Conv {
  std::vector<float> w;  // [c_out, c_in, k, k]
  std::vector<float> b;  // [c_out]
  int64_t c_in = 0, c_out = 0, k = 0;
};

struct GroupNormWeights {
  std::vector<float> w, b;  // [c]
};

struct ResnetBlock {
  GroupNormWeights norm1, norm2;
  Conv conv1, conv2;
  Conv shortcut;  // 1x1 when c_in != c_out, else empty
};

struct VaeAttention {
  GroupNormWeights norm;
  ops::LinearWeight q, k, v, out;  // [c, c]
  std::vector<float> bq, bk, bv, bout;
};

struct VaeMidBlock {
  ResnetBlock res0, res1;
  bool has_attention = false;
  VaeAttention attn;
};

struct VaeLevel {
  std::vector<ResnetBlock> resnets;
  bool resample = false;  // upsample (decoder) or downsample (encoder) after the resnets
  Conv resample_conv;
};

class AutoencoderKL {
 public:
  static Result<AutoencoderKL> load(const std::string& dir);

  const VaeConfig& config() const { return config_; }

  // z: [n, latent_channels, h, w] in the VAE's own scale (after FluxPipeline's
  // z / scaling_factor + shift_factor); image: [n, out_channels, h * scale, w * scale].
  Status decode(const float* z, int64_t n, int64_t h, int64_t w, std::vector<float>* image,
                ThreadPool& pool) const;

  // image: [n, in_channels, h, w], h and w multiples of scale(); mean: [n, latent_channels,
  // h / scale, w / scale], latent_dist.mean (unscaled).
  Status encode_mean(const float* image, int64_t n, int64_t h, int64_t w, std::vector<float>* mean,
                     ThreadPool& pool) const;

 private:
  VaeConfig config_;
  Conv dec_conv_in_, dec_conv_out_, post_quant_conv_;
  VaeMidBlock dec_mid_;
  std::vector<VaeLevel> up_;  // in decoder order (deepest first)
  GroupNormWeights dec_norm_out_;
  Conv enc_conv_in_, enc_conv_out_, quant_conv_;
  VaeMidBlock enc_mid_;
  std::vector<VaeLevel> down_;
  GroupNormWeights enc_norm_out_;
  bool has_encoder_ = false;
};

Result<VaeConfig> read_vae_config(const models::Component& c);

}  // namespace qs::diffusion
