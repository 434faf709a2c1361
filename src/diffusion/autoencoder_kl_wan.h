// diffusion: diffusers' AutoencoderKLWan, the causal 3-D VAE of Wan2.1 (z_dim 16, 8x spatial)
// and Wan2.2 TI2V-5B (is_residual: z_dim 48, patch 2, 16x spatial, residual up/down blocks
// with AvgDown3D / DupUp3D shortcuts). Causal 3x3x3 convolutions with RMS norms, a single-head
// attention per frame in the middle, 2-D and 2-D + time resampling between levels. Like
// diffusers it decodes one latent frame at a time and encodes the first frame then chunks of
// four, each causal convolution carrying the last two frames of its input across chunks
// (feat_cache, CACHE_T = 2), so memory holds one chunk's activations, not the video's.
// [c, t, h, w] f32 throughout; videos in [-1, 1].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/component.h"

namespace qs::diffusion {

// vae/config.json (AutoencoderKLWan's register_to_config arguments).
struct WanVaeConfig {
  int64_t base_dim = 96;          // encoder width
  int64_t decoder_base_dim = 96;  // null in the file: base_dim
  int64_t z_dim = 16;
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  // One entry per level but the last: that level halves time too (the decoder reverses it).
  std::vector<bool> temperal_downsample = {false, true, true};
  std::vector<double> latents_mean, latents_std;  // [z_dim]
  bool is_residual = false;
  int64_t in_channels = 3, out_channels = 3;  // after patchify (Wan2.2: 3 * 2 * 2)
  int64_t patch_size = 1;                     // null in the file: no patchify
  int64_t scale_factor_temporal = 4, scale_factor_spatial = 8;

  // RGB channels of a video: in_channels before patchify.
  int64_t video_channels() const { return in_channels / (patch_size * patch_size); }
};

Result<WanVaeConfig> read_wan_vae_config(const models::Component& c);

// The pipeline's latent (de-)normalisation, per channel c of z [z_dim, t, h, w], in f32 as
// pipeline_wan.py computes it with inv = 1 / latents_std: wan_denormalize before decoding
// (z / inv + mean), wan_normalize after encoding (pipeline_wan_i2v.py: (z - mean) * inv).
void wan_denormalize(const WanVaeConfig& cfg, float* z, int64_t t, int64_t h, int64_t w);
void wan_normalize(const WanVaeConfig& cfg, float* z, int64_t t, int64_t h, int64_t w);

// Frames every causal convolution keeps of its input across chunks (diffusers' CACHE_T).
constexpr int64_t kWanVaeCacheFrames = 2;
// The most latent frames, rows or columns a call takes (far past any video: 480x832 is 60x104
// latents), so that sizes times scales stay far from overflow.
constexpr int64_t kWanVaeMaxSide = int64_t{1} << 16;

// A convolution as stored: WanCausalConv3d [c_out, c_in, kt, kh, kw], or nn.Conv2d [c_out, c_in,
// kh, kw] held with kt = 1.
struct WanConv {
  std::vector<float> w, b;  // w [c_out, c_in, kt, kh, kw], b [c_out]
  int64_t c_in = 0, c_out = 0, kt = 1, kh = 1, kw = 1;
  int cache = -1;  // the slot of its frames across chunks (kt > 1), or -1
};

// WanResidualBlock: shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x)))))).
struct WanResBlock {
  std::vector<float> gamma1, gamma2;  // [c_in], [c_out] (WanRMS_norm, no bias)
  WanConv conv1, conv2;               // 3x3x3 causal
  WanConv shortcut;                   // 1x1x1 when c_in != c_out, else empty
};

// WanAttentionBlock: one head over the h * w pixels of each frame.
struct WanAttention {
  std::vector<float> gamma;  // [c]
  WanConv qkv;               // [3c, c, 1, 1, 1]: q, k, v in that order
  WanConv proj;              // [c, c, 1, 1, 1]
};

enum class WanResampleMode { kNone, kUp2d, kUp3d, kDown2d, kDown3d };

// WanResample: nearest 2x + 3x3 conv (up) or a stride-2 3x3 conv (down) on every frame; the
// 3d modes add a time convolution that doubles (up: [2c, c, 3, 1, 1], before the 2-D part)
// or halves (down: [c, c, 3, 1, 1] with stride 2, after it) the frames.
struct WanResample {
  WanResampleMode mode = WanResampleMode::kNone;
  WanConv conv, time_conv;
  int cache = -1;  // the time convolution's slot
};

// One level of the encoder (res blocks, then a downsample) or decoder (res blocks, then an
// upsample). Wan2.2's residual blocks add a shortcut around the whole level: AvgDown3D in
// the encoder, DupUp3D in the decoder, from `shortcut_in` to `shortcut_out` channels, time by
// factor_t and each side by factor_s.
struct WanLevel {
  std::vector<WanResBlock> resnets;
  WanResample resample;
  bool shortcut = false;
  int64_t shortcut_in = 0, shortcut_out = 0, factor_t = 1, factor_s = 1;
};

struct WanMidBlock {
  WanResBlock res0, res1;
  WanAttention attn;
};

// One direction of the VAE: conv_in, levels, mid block, norm_out + conv_out (encoder), or
// conv_in, mid block, levels, norm_out + conv_out (decoder).
struct WanCoder {
  WanConv conv_in, conv_out;
  WanMidBlock mid;
  std::vector<WanLevel> levels;
  std::vector<float> gamma_out;
  int n_caches = 0;  // slots of frames one video's chunks carry (diffusers' feat_cache)
};

// One level of WanDecoder3d (up_blocks.i): its input and output widths (base *
// [dim_mult[-1]] + base * dim_mult[::-1]; Wan2.1's levels after the first take half their
// predecessor's width, which its upsample conv halved, Wan2.2's keep it), and for every level
// but the last the upsampler's mode, output width and DupUp3D's time factor.
struct WanVaeUpLevel {
  int64_t in = 0, out = 0, resample_out = 0;
  WanResampleMode mode = WanResampleMode::kNone;
  int64_t factor_t = 1;  // DupUp3D's (Wan2.2, levels that upsample)
};
std::vector<WanVaeUpLevel> wan_vae_decoder_levels(const WanVaeConfig& config);

class AutoencoderKLWan {
 public:
  static Result<AutoencoderKLWan> load(const std::string& dir);

  const WanVaeConfig& config() const { return config_; }
  int64_t spatial_scale() const { return config_.scale_factor_spatial; }
  int64_t temporal_scale() const { return config_.scale_factor_temporal; }

  // z: [channels = z_dim, t, h, w], one video, de-normalised (wan_denormalize) as the pipeline
  // passes it. Returns the video [video_channels, 1 + 4 * (t - 1), h * s, w * s], clamped to
  // [-1, 1] as diffusers' _decode does (the pipeline's postprocessing clamps again).
  Result<std::vector<float>> decode(const float* z, int64_t channels, int64_t t, int64_t h,
                                    int64_t w, ThreadPool& pool) const;
  // x: [video_channels, f, height, width] in [-1, 1], f = 1 + 4k, height and width multiples
  // of spatial_scale() -> [z_dim, 1 + (f - 1) / 4, height / s, width / s], the latent
  // distribution's mode (its mean), before wan_normalize.
  Result<std::vector<float>> encode_mean(const float* x, int64_t f, int64_t height, int64_t width,
                                         ThreadPool& pool) const;

 private:
  WanVaeConfig config_;
  WanConv post_quant_conv_, quant_conv_;  // 1x1x1; quant_conv_ holds the mean's rows only
  WanCoder decoder_, encoder_;
  bool has_encoder_ = false;
};

// The most bytes decode(t, h, w) on a pool of `threads` allocates at once besides the weights:
// the output video plus the frame caches and the largest set of one chunk's activations and
// per-thread buffers (derived beside it), for the memory planner; it grows with t through the
// output only. Checked against the allocator for Wan2.1 at 240x416, t = 3, 2 threads: 1593
// MiB estimated, 1594 MiB at the peak; the process's RSS rose 8 % more (glibc keeps freed
// blocks).
size_t wan_vae_decode_peak_bytes(const WanVaeConfig& cfg, int64_t t, int64_t h, int64_t w,
                                 int threads);

}  // namespace qs::diffusion
