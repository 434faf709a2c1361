// diffusion: FluxPipeline (diffusers' pipeline_flux.py) over a pipeline directory:
// prompt -> CLIP pooled vector + T5 hidden states -> packed 2x2 latent noise -> flow-matching
// Euler steps of the transformer (one batched forward of both branches when true CFG is on)
// -> unpacked, un-scaled latents -> VAE decode -> an RGB image in [0, 1]. The decoder may be a
// TAESD-family tiny autoencoder instead of the pipeline's AutoencoderKL (--vae-decoder tiny).
// With a 2-rank CFG-parallel group (set_cfg_parallel) the two branches run on two processes
// instead, as vLLM-Omni's --cfg-parallel-size 2 (flux_cfg_parallel.h has the protocol).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/autoencoder_kl.h"
#include "diffusion/clip_text_model.h"
#include "diffusion/flow_match_scheduler.h"
#include "diffusion/flux_transformer.h"
#include "diffusion/pipeline.h"
#include "diffusion/t5_encoder.h"
#include "diffusion/tiny_autoencoder.h"
#include "dist/communicator.h"
#include "tokenizer/clip_tokenizer.h"
#include "tokenizer/unigram_tokenizer.h"

namespace qs::diffusion {

struct FluxRequest {
  std::string prompt;
  std::string negative_prompt;  // used only with true_cfg_scale > 1
  int64_t width = 1024, height = 1024;
  int64_t steps = 28;
  double guidance_scale = 3.5;        // the distilled guidance embedding (FLUX.1-dev)
  double true_cfg_scale = 1.0;        // > 1 with a negative prompt: two branches per step
  int64_t max_sequence_length = 512;  // T5 tokens
  uint64_t seed = 0;
  // Packed initial noise [n_img, 4 * latent_channels] (as FluxPipeline's `latents`); empty:
  // drawn from `seed` (quantserve's own generator: not torch's, so not diffusers' noise).
  std::vector<float> noise;
  // Called after each step with (step index, steps, latents [n_img, channels]).
  std::function<void(int64_t, int64_t, const std::vector<float>&)> on_step;
  // Asked after each step: true ends the run there with an error ("cancelled after step
  // i/n"), so a server can drop an image whose client has gone.
  std::function<bool()> cancelled;
};

// Wall seconds of each denoising step, and of it the CFG-parallel exchange (all-gather of the
// predictions and the continue flag, waiting for the peer included; empty when the request ran
// in one process).
struct FluxStepTimes {
  std::vector<double> step_seconds, exchange_seconds;
};

struct FluxImage {
  int64_t width = 0, height = 0;
  std::vector<float> rgb;      // [height, width, 3] in [0, 1]
  std::vector<float> latents;  // the final packed latents [n_img, channels]
  FluxStepTimes times;
};

struct FluxLoadOptions {
  // A folder holding a tiny autoencoder's <name>_decoder.pth (TAESD family: taef1 for
  // FLUX.1's 16-channel latents, taef2 for 32): decode with it instead of vae/. It takes the
  // transformer's latents as they are (diffusers' AutoencoderTiny: scaling 1, shift 0), and
  // must match their channels and vae/'s 8x scale. Empty: vae/ (AutoencoderKL).
  std::string tiny_vae;
};

class FluxPipeline : public DiffusionPipeline {
 public:
  static Result<std::unique_ptr<FluxPipeline>> load(const std::string& dir,
                                                    const FluxLoadOptions& options = {});

  // DiffusionPipeline: a request's fields as FluxRequest's (latents as noise; the sizes, steps,
  // guidance and sequence length as diffusers' FluxPipeline defaults them); the video fields
  // (num_frames > 1, an image, guidance_scale_2, boundary_ratio, flow_shift) are refused.
  const PipelineFamilySpec& family() const override;
  const std::string& class_name() const override { return class_name_; }
  DiffusionRequest resolve(DiffusionRequest req) const override;
  Status validate(const DiffusionRequest& req) const override;
  // One step's transformer activations (both branches under batched true CFG), the text
  // embeddings, latents and the image; the VAE decode's own working set is not counted.
  size_t request_peak_bytes(const DiffusionRequest& req, int threads) const override;
  // The components' weight files (the tiny decoder's instead of vae/'s when it decodes).
  size_t resident_bytes() const override { return resident_bytes_; }
  Result<std::vector<float>> denoise(const DiffusionRequest& req, ThreadPool& pool,
                                     DiffusionOutput* times = nullptr) const override;
  Result<DiffusionOutput> decode(std::vector<float> latents, const DiffusionRequest& req,
                                 ThreadPool& pool) const override;
  std::vector<std::string> latents_dims() const override { return {"n_img", "channels"}; }
  std::vector<int64_t> latents_shape(const DiffusionRequest& req) const override;
  // Packed 2 x 2 latents of the VAE's scale (latent_shape's unit).
  int64_t spatial_multiple() const override { return vae_config_.scale() * 2; }
  using DiffusionPipeline::generate;

  // Every check generate() makes before it runs anything (size, steps, sequence length,
  // guidance), so a server can answer a bad request before queueing it.
  Status validate(const FluxRequest& req) const;
  // diffusers' FluxPipeline default: default_sample_size (128) x vae_scale_factor a side.
  int64_t default_size() const;

  // The packed latent grid a request of this size runs on: n_img tokens of `channels`.
  Status latent_shape(const FluxRequest& req, int64_t* n_img, int64_t* channels) const;
  // denoise, then decode.
  Result<FluxImage> generate(const FluxRequest& req, ThreadPool& pool) const;
  // The denoising loop alone: the final packed latents [n_img, channels] (latent_shape), what
  // diffusers' FluxPipeline returns for output_type="latent".
  Result<std::vector<float>> denoise(const FluxRequest& req, ThreadPool& pool) const;
  // Packed latents [n_img, channels] of a width x height image, unpacked and decoded by the
  // pipeline's decoder (vae/, or the tiny autoencoder) into the image generate() returns.
  Result<FluxImage> decode(std::vector<float> latents, int64_t width, int64_t height,
                           ThreadPool& pool) const;

  const FluxTransformer& transformer() const { return transformer_; }

  // CFG parallelism over a 2-rank group (vLLM-Omni's CFGParallelMixin). On rank 0, generate()
  // and denoise() of a true-CFG request (negative prompt, true_cfg_scale > 1) send the request
  // to rank 1, which must be in run_cfg_worker(); rank 0 encodes and runs the positive branch,
  // rank 1 the negative, the predictions are all-gathered each step and both ranks combine them
  // and step their scheduler alike; rank 0 alone calls on_step and cancelled, and sends a
  // continue/stop flag after each step so that both stop at the same one. Rank 0 alone decodes.
  // Other requests run on rank 0 alone. Each wait on the peer is bounded (30 s plus 3x this
  // rank's time for the same work): a peer that stops answering fails the request with
  // kUnavailable and breaks the group, after which `on_broken` (if set) is called with the
  // group's error on the thread that ran the request, so that a server can stop. Null: one
  // process (the default).
  bool supports_cfg_parallel() const override { return true; }
  Status set_cfg_parallel(std::shared_ptr<dist::Communicator> group,
                          std::function<void(const Status&)> on_broken = {}) override;
  // Rank 1: runs the requests rank 0 sends until it sends stop (send_cfg_stop), logging a failed
  // one and going on; an error only once the group is broken.
  Status run_cfg_worker(ThreadPool& pool) const override;

 private:
  // Which branches this process runs: kPositive without true CFG; kBatched both in one batch-2
  // forward; kCfgRank0/1 its own branch of a CFG-parallel pair.
  enum class Branches { kPositive, kBatched, kCfgRank0, kCfgRank1 };
  Result<std::vector<float>> denoise_timed(const FluxRequest& req, ThreadPool& pool,
                                           FluxStepTimes* times) const;
  Result<std::vector<float>> denoise_branches(const FluxRequest& req, Branches branches,
                                              ThreadPool& pool, FluxStepTimes* times) const;

  struct Prompt {
    std::vector<float> pooled;  // [pooled_projection_dim]
    std::vector<float> hidden;  // [max_sequence_length, joint_attention_dim]
  };
  Result<Prompt> encode_prompt(const std::string& text, int64_t max_sequence_length,
                               ThreadPool& pool) const;
  // A resolved DiffusionRequest as FluxRequest (the callbacks and noise carried over).
  FluxRequest flux_request(const DiffusionRequest& req) const;

  std::string class_name_ = "FluxPipeline";
  size_t resident_bytes_ = 0;

  std::unique_ptr<tok::ClipTokenizer> clip_tok_;
  std::unique_ptr<tok::UnigramTokenizer> t5_tok_;
  ClipTextModel clip_;
  T5Encoder t5_;
  FluxTransformer transformer_;
  VaeConfig vae_config_;                   // vae/config.json: scale and latent channels
  AutoencoderKL vae_;                      // loaded unless tiny_ is
  std::unique_ptr<TinyAutoencoder> tiny_;  // FluxLoadOptions::tiny_vae
  FlowMatchConfig scheduler_;
  std::shared_ptr<dist::Communicator> cfg_group_;  // set_cfg_parallel; null: one process
  std::function<void(const Status&)> cfg_on_broken_;
};

// The registry's loader of FluxPipeline directories.
Result<std::unique_ptr<DiffusionPipeline>> load_flux_pipeline(const PipelineIndex& index,
                                                              const PipelineLoadOptions& options);

// ids: (0, row, col) for each packed latent token, row-major ([h2 * w2, 3]).
std::vector<float> flux_image_ids(int64_t h2, int64_t w2);

}  // namespace qs::diffusion
