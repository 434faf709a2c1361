// diffusion: one interface over every diffusers pipeline quantserve runs (FLUX.1's
// FluxPipeline, Wan2.2's WanPipeline / WanImageToVideoPipeline), so that generate-image,
// generate-video, the image and video servers, compare-images and Python drive any family the
// same way, as vLLM-Omni's DiffusionEngine drives its registered pipelines. A request is
// vLLM-Omni's sampling parameters (OmniDiffusionSamplingParams' names); each family maps it to
// its own request type (FluxRequest, WanRequest, which its goldens use directly) and refuses by
// name what it does not take. The families themselves are listed in pipeline_registry.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/pipeline_index.h"
#include "dist/communicator.h"

namespace qs::diffusion {

// What a pipeline makes: the API and command that serve it follow (images: generate-image and
// /v1/images/generations; videos: generate-video and /v1/videos).
enum class PipelineOutput { kImage, kVideo };

const char* pipeline_output_name(PipelineOutput output);  // "image", "video"

// vLLM-Omni's OmniDiffusionSamplingParams, the fields quantserve's pipelines read. Unset is the
// pipeline's default (DiffusionPipeline::resolve fills every optional one in); a value given is
// the caller's, 0 included, so that a client's 0 frames or 0 steps reaches validate() and is
// refused instead of becoming the default.
struct DiffusionRequest {
  std::string prompt;
  std::string negative_prompt;  // the unconditional branch's prompt, where there is CFG
  std::optional<int64_t> width, height;
  std::optional<int64_t> num_frames;  // videos; an image pipeline takes 1
  std::optional<int64_t> num_inference_steps;
  std::optional<double> guidance_scale;        // FLUX.1: its distilled guidance; Wan: CFG's scale
  std::optional<double> true_cfg_scale;        // FLUX.1's true CFG
  std::optional<double> guidance_scale_2;      // Wan2.2 A14B's low-noise expert
  std::optional<double> boundary_ratio;        // Wan2.2 A14B: where the experts split
  std::optional<double> flow_shift;            // Wan's scheduler
  std::optional<int64_t> max_sequence_length;  // text encoder tokens
  uint64_t seed = 0;
  // The initial noise in the family's latent layout (vLLM-Omni's `latents`); empty: drawn from
  // `seed` by quantserve's own generator (not torch's).
  std::vector<float> latents;
  // A first frame [3, height, width] in [-1, 1] (image to video), as VideoProcessor gives it.
  std::vector<float> image;
  // Called after each denoising step with (step index, steps, latents).
  std::function<void(int64_t, int64_t, const std::vector<float>&)> on_step;
  // Asked after each step: true ends the run with an error ("cancelled after step i/n").
  std::function<bool()> cancelled;
};

struct DiffusionOutput {
  int64_t width = 0, height = 0, frames = 0;  // an image is one frame
  std::vector<float> rgb;                     // [frames, height, width, 3] in [0, 1]
  std::vector<float> latents;                 // the final latents, in the family's layout
  std::vector<double> step_seconds;           // each denoising step's wall time
  // Of each step, the CFG-parallel exchange (FLUX.1 over two ranks); empty in one process.
  std::vector<double> exchange_seconds;
};

struct PipelineLoadOptions {
  // A TAESD-family tiny autoencoder folder to decode with instead of vae/ (FLUX.1 only; see
  // FluxLoadOptions).
  std::string tiny_vae;
};

struct PipelineFamilySpec;

class DiffusionPipeline {
 public:
  virtual ~DiffusionPipeline() = default;

  virtual const PipelineFamilySpec& family() const = 0;
  virtual const std::string& class_name() const = 0;  // model_index.json's _class_name
  PipelineOutput output() const;

  // The request with every unset field at this pipeline's default (size, frames, steps,
  // guidance, sequence length), as diffusers' __call__ fills its arguments.
  virtual DiffusionRequest resolve(DiffusionRequest req) const = 0;
  // Every check generate() makes before it runs anything, on the resolved request: a field the
  // family does not take is refused by name, so that a server can answer 400 before queueing.
  virtual Status validate(const DiffusionRequest& req) const = 0;
  // Bytes a resolved request needs beyond the resident weights, at its largest.
  virtual size_t request_peak_bytes(const DiffusionRequest& req, int threads) const = 0;
  virtual size_t resident_bytes() const = 0;
  // Whether the pipeline needs (I2V) or takes (TI2V) a first frame; image pipelines take none.
  virtual bool requires_image() const { return false; }
  virtual bool takes_image() const { return false; }
  // The axes of the family's latents, what DiffusionRequest::latents holds (FLUX.1: n_img,
  // channels, packed 2x2; Wan: z, frames, h, w).
  virtual std::vector<std::string> latents_dims() const = 0;
  // Their sizes for a resolved request (what DiffusionRequest::latents must hold); empty when the
  // request has no size the pipeline can take (validate says why).
  virtual std::vector<int64_t> latents_shape(const DiffusionRequest& req) const = 0;
  // The frame rate a video of this model is written at by default (0 for image pipelines).
  virtual int default_fps() const { return 0; }
  // The grid validate() holds a size and a frame count to: width and height multiples of
  // spatial_multiple() (the VAE's scale times the transformer's patch), frames
  // frame_multiple() * k + 1 (the VAE's temporal compression; 1 for images). What a server
  // rounds a size or frame count it derives to, as vLLM-Omni's pre-processing does.
  virtual int64_t spatial_multiple() const = 0;
  virtual int64_t frame_multiple() const { return 1; }

  // The denoising loop alone (diffusers' output_type="latent"): the final latents, with
  // each step's seconds (and exchange seconds) in `times` when it is not null.
  virtual Result<std::vector<float>> denoise(const DiffusionRequest& req, ThreadPool& pool,
                                             DiffusionOutput* times = nullptr) const = 0;
  // Latents of a resolved request -> the pipeline's decoder -> frames.
  virtual Result<DiffusionOutput> decode(std::vector<float> latents, const DiffusionRequest& req,
                                         ThreadPool& pool) const = 0;
  // resolve, validate, denoise, decode.
  Result<DiffusionOutput> generate(DiffusionRequest req, ThreadPool& pool) const;

  // CFG parallelism over a 2-rank group (vLLM-Omni's CFGParallelMixin, --cfg-parallel-size 2):
  // rank 0 generates, rank 1 runs run_cfg_worker until rank 0 stops it. Families without it
  // refuse both with kUnimplemented.
  virtual bool supports_cfg_parallel() const { return false; }
  virtual Status set_cfg_parallel(std::shared_ptr<dist::Communicator> group,
                                  std::function<void(const Status&)> on_broken = {});
  virtual Status run_cfg_worker(ThreadPool& pool) const;
};

// Reads dir's model_index.json, finds its family in the registry and loads it.
Result<std::unique_ptr<DiffusionPipeline>> load_pipeline(const std::string& dir,
                                                         const PipelineLoadOptions& options = {});

// The field a family refuses, as its validate() says it: "<field> does not apply to <family>
// pipelines (<what it is for>)".
Status refuse_field(const PipelineFamilySpec& family, const char* field, const char* why);

}  // namespace qs::diffusion
