// diffusion: diffusers' WanPipeline and WanImageToVideoPipeline (pipeline_wan.py,
// pipeline_wan_i2v.py) over a pipeline directory, for the Wan2.2 family: prompt -> UMT5
// embeddings -> latent noise [z, T, h, w] -> UniPC steps of the transformer (the high-noise
// expert `transformer` at t >= boundary_ratio * 1000, the low-noise `transformer_2` below it,
// each with its own guidance scale; both CFG branches in one batch-2 forward) -> de-normalised
// latents -> the causal 3-D VAE, decoded a latent frame at a time -> RGB frames in [0, 1].
// Image to video: A14B concatenates a 4-channel first-frame mask and the VAE-encoded image
// video to the noise (36 input channels); TI2V-5B (expand_timesteps) puts the encoded image in
// the first latent frame and gives its tokens timestep 0.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/autoencoder_kl_wan.h"
#include "diffusion/pipeline.h"
#include "diffusion/unipc_scheduler.h"
#include "diffusion/wan_text.h"
#include "diffusion/wan_transformer.h"

namespace qs::diffusion {

struct WanRequest {
  std::string prompt;
  std::string negative_prompt;  // the unconditional branch's prompt when guidance_scale > 1
  int64_t width = 832, height = 480;
  int64_t num_frames = 81;  // 4k + 1 (the VAE's 4x temporal compression keeps the first frame)
  int64_t steps = 50;
  double guidance_scale = 5.0;             // CFG (> 1: two branches per step)
  std::optional<double> guidance_scale_2;  // transformer_2's; default guidance_scale
  std::optional<double> boundary_ratio;    // default: model_index.json's
  std::optional<double> flow_shift;        // default: scheduler_config.json's
  int64_t max_sequence_length = 512;       // UMT5 tokens
  uint64_t seed = 0;
  // Initial noise [z_dim, T, h, w] (diffusers' `latents`); empty: drawn from `seed` with
  // quantserve's own generator (not torch's, so not diffusers' noise).
  std::vector<float> noise;
  // Image to video: the first frame [3, height, width] in [-1, 1] (as VideoProcessor.preprocess
  // gives it). Required by WanImageToVideoPipeline directories; for an expand_timesteps (TI2V)
  // pipeline it turns a text-to-video run into image-to-video.
  std::vector<float> image;
  // Called after each step with (step index, steps, latents [z_dim, T, h, w]).
  std::function<void(int64_t, int64_t, const std::vector<float>&)> on_step;
  // Asked after each step: true ends the run with an error ("cancelled after step i/n"), as FLUX's.
  std::function<bool()> cancelled;
};

struct WanVideo {
  int64_t width = 0, height = 0, frames = 0;
  std::vector<float> rgb;      // [frames, height, width, 3] in [0, 1]
  std::vector<float> latents;  // the final latents [z_dim, T, h, w], before de-normalisation
  std::vector<double> step_seconds;
};

class WanPipeline : public DiffusionPipeline {
 public:
  static Result<std::unique_ptr<WanPipeline>> load(const std::string& dir);

  // DiffusionPipeline: a request's fields as WanRequest's (latents as noise; 832x480, 81
  // frames, 50 steps, guidance 5 and 512 tokens by default, as diffusers' WanPipeline);
  // true_cfg_scale is refused (guidance_scale is Wan's CFG scale).
  const PipelineFamilySpec& family() const override;
  const std::string& class_name() const override { return class_name_; }
  DiffusionRequest resolve(DiffusionRequest req) const override;
  Status validate(const DiffusionRequest& req) const override;
  size_t request_peak_bytes(const DiffusionRequest& req, int threads) const override;
  bool requires_image() const override { return image_to_video_; }
  bool takes_image() const override { return image_to_video_ || expand_timesteps_; }
  Result<std::vector<float>> denoise(const DiffusionRequest& req, ThreadPool& pool,
                                     DiffusionOutput* times = nullptr) const override;
  Result<DiffusionOutput> decode(std::vector<float> latents, const DiffusionRequest& req,
                                 ThreadPool& pool) const override;
  std::vector<std::string> latents_dims() const override { return {"z", "frames", "h", "w"}; }
  std::vector<int64_t> latents_shape(const DiffusionRequest& req) const override;
  using DiffusionPipeline::generate;

  // Every check generate() makes before it runs anything (sizes, frames, steps, guidance,
  // image), so that a server can answer a bad request before queueing it.
  Status validate(const WanRequest& req) const;
  // The latent grid of a request: [z_dim, frames, height, width].
  struct LatentShape {
    int64_t channels = 0, frames = 0, height = 0, width = 0;
    int64_t numel() const { return channels * frames * height * width; }
  };
  LatentShape latent_shape(const WanRequest& req) const;

  // Bytes a request needs beyond the resident weights, at its largest: the denoising loop's
  // activations (both CFG branches), the VAE's decode of one chunk with the whole output, and
  // the frames as f32 and 8-bit. What a server checks against its memory budget up front.
  size_t request_peak_bytes(const WanRequest& req, int threads) const;
  // Resident bytes of the loaded components (text encoder, transformer(s), VAE).
  size_t resident_bytes() const override;

  Result<WanVideo> generate(const WanRequest& req, ThreadPool& pool) const;
  // The denoising loop alone: the final latents (output_type="latent", with TI2V's image frame
  // merged in as diffusers does before decoding).
  Result<std::vector<float>> denoise(const WanRequest& req, ThreadPool& pool,
                                     std::vector<double>* step_seconds = nullptr) const;
  // Latents [z_dim, T, h, w] -> de-normalised -> VAE -> frames [F, H, W, 3] in [0, 1].
  Result<WanVideo> decode(std::vector<float> latents, int64_t frames, int64_t height, int64_t width,
                          ThreadPool& pool) const;

  bool image_to_video() const { return image_to_video_; }  // WanImageToVideoPipeline
  bool expand_timesteps() const { return expand_timesteps_; }
  std::optional<double> boundary_ratio() const { return boundary_ratio_; }
  const WanTransformer* transformer() const { return transformer_.get(); }
  const WanTransformer* transformer_2() const { return transformer_2_.get(); }
  const AutoencoderKLWan& vae() const { return vae_; }
  int64_t spatial_multiple() const override;  // height and width must be multiples of this
  int64_t frame_multiple() const override { return vae_.temporal_scale(); }
  // The frame rate the model was trained for: Wan2.2's A14B models make 16 fps video, TI2V-5B
  // (the expand_timesteps pipeline) 24 fps; what an MP4 of it is written at by default.
  int default_fps() const override { return expand_timesteps_ ? 24 : 16; }

 private:
  // The image condition: A14B's [4 + z_dim, T, h, w] (mask, then encoded latents), TI2V's
  // [z_dim, 1, h, w] (the first latent frame).
  Result<std::vector<float>> image_condition(const WanRequest& req, ThreadPool& pool) const;
  // A resolved DiffusionRequest as WanRequest (the callbacks, noise and image carried over).
  WanRequest wan_request(const DiffusionRequest& req) const;

  std::string class_name_;
  bool image_to_video_ = false;
  bool expand_timesteps_ = false;
  std::optional<double> boundary_ratio_;
  WanTextEncoder text_;
  std::unique_ptr<WanTransformer> transformer_, transformer_2_;
  AutoencoderKLWan vae_;
  UniPCConfig scheduler_;
  size_t resident_bytes_ = 0;
};

// The registry's loader of WanPipeline and WanImageToVideoPipeline directories.
Result<std::unique_ptr<DiffusionPipeline>> load_wan_pipeline(const PipelineIndex& index,
                                                             const PipelineLoadOptions& options);

}  // namespace qs::diffusion
