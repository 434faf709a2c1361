// apps: `quantserve generate-image --model DIR --prompt TEXT [--negative-prompt TEXT]
// [--width W --height H] [--steps N] [--guidance-scale G] [--true-cfg-scale S] [--seed S]
// [--noise FILE] [--cfg-parallel-size 2] --out FILE.png`: one image from a diffusers pipeline
// directory of an image family (FLUX.1) through diffusion::DiffusionPipeline, with a per-step
// progress line on a terminal and the timings on stderr. Flags not given are the pipeline's
// defaults.
// Under `mpirun -np 2` with --cfg-parallel-size 2, rank 1 runs the negative branch and stays
// silent; rank 0 writes the image.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/cfg_parallel.h"
#include "apps/commands.h"
#include "apps/diffusion_cli.h"
#include "apps/flags.h"
#include "apps/model_flags.h"
#include "diffusion/pipeline.h"
#include "diffusion/png_image.h"

namespace qs::apps {
namespace {

// The denoising steps alone (what scripts/bench_cfg_parallel.sh reads): median seconds a step,
// and with CFG parallelism the median exchange and its share of the step.
void print_step_times(const diffusion::DiffusionOutput& out) {
  if (out.step_seconds.empty()) return;
  const double step = median(out.step_seconds);
  if (out.exchange_seconds.empty()) {
    std::fprintf(stderr, "generate-image: denoising step median %.4f s\n", step);
    return;
  }
  const double exchange = median(out.exchange_seconds);
  std::fprintf(stderr,
               "generate-image: denoising step median %.4f s, CFG-parallel exchange median %.4f "
               "s (%.1f%% of a step)\n",
               step, exchange, step > 0 ? 100.0 * exchange / step : 0.0);
}

Status check(const Flags& flags) {
  if (!flags.has("model")) return invalid_argument("--model DIR is required");
  if (!flags.has("prompt")) return invalid_argument("--prompt TEXT is required");
  if (!flags.has("out")) return invalid_argument("--out FILE.png is required");
  for (const char* f : {"width", "height", "steps", "seed", "max-sequence-length", "threads",
                        "cfg-parallel-size"}) {
    if (flags.has(f)) QS_RETURN_IF_ERROR(flags.get_int(f).status());
  }
  for (const char* f : {"guidance-scale", "true-cfg-scale"}) {
    if (flags.has(f)) QS_RETURN_IF_ERROR(flags.get_double(f).status());
  }
  return ok_status();
}

// The flags as a request; the ones not given stay unset, for the pipeline's defaults.
Result<diffusion::DiffusionRequest> request_from_flags(const Flags& flags) {
  diffusion::DiffusionRequest req;
  req.prompt = flags.get("prompt");
  req.negative_prompt = flags.get("negative-prompt");
  if (flags.has("width")) {
    QS_ASSIGN_OR_RETURN(req.width, flags.get_int("width"));
  }
  if (flags.has("height")) {
    QS_ASSIGN_OR_RETURN(req.height, flags.get_int("height"));
  }
  if (flags.has("steps")) {
    QS_ASSIGN_OR_RETURN(req.num_inference_steps, flags.get_int("steps"));
  }
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
  req.seed = static_cast<uint64_t>(seed);
  if (flags.has("max-sequence-length")) {
    QS_ASSIGN_OR_RETURN(req.max_sequence_length, flags.get_int("max-sequence-length"));
  }
  if (flags.has("guidance-scale")) {
    QS_ASSIGN_OR_RETURN(req.guidance_scale, flags.get_double("guidance-scale"));
  }
  if (flags.has("true-cfg-scale")) {
    QS_ASSIGN_OR_RETURN(req.true_cfg_scale, flags.get_double("true-cfg-scale"));
  }
  return req;
}

Status run(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(diffusion::DiffusionRequest req, request_from_flags(flags));
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  if (threads <= 0 || threads > 1024) return invalid_argument("--threads must be 1 to 1024");

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  diffusion::PipelineLoadOptions load;
  const std::string decoder = flags.get("vae-decoder");
  if (decoder == "tiny") {
    load.tiny_vae = flags.get("tiny-vae");
  } else if (decoder != "full") {
    return invalid_argument("--vae-decoder must be full or tiny, not '" + decoder + "'");
  }
  QS_ASSIGN_OR_RETURN(CfgParallelSetup cfg, cfg_parallel_setup(flags, static_cast<int>(threads)));
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, flags.get("model")));
  QS_RETURN_IF_ERROR(
      require_pipeline_output(dir, diffusion::PipelineOutput::kImage, "generate-image"));
  QS_ASSIGN_OR_RETURN(std::unique_ptr<diffusion::DiffusionPipeline> pipe,
                      load_cfg_pipeline(dir, load, cfg.group));
  ThreadPool pool(cfg.threads);
  if (cfg.worker()) return pipe->run_cfg_worker(pool);
  // Rank 1 has gone into its loop: from here on, every way out must stop it.
  const CfgWorkerStop stop_worker(cfg.group);
  req = pipe->resolve(std::move(req));
  const bool true_cfg = req.true_cfg_scale.value_or(1.0) > 1.0;
  if (true_cfg && req.negative_prompt.empty()) {
    std::fprintf(stderr,
                 "generate-image: --true-cfg-scale > 1 without --negative-prompt: "
                 "one branch per step, as diffusers\n");
  }
  if (flags.has("noise")) {
    QS_ASSIGN_OR_RETURN(req.latents, read_pipeline_noise(flags.get("noise"), *pipe));
  }
  QS_RETURN_IF_ERROR(pipe->validate(req));
  const auto t1 = clock::now();
  std::fprintf(stderr, "generate-image: loaded %s in %.2f s\n", flags.get("model").c_str(),
               std::chrono::duration<double>(t1 - t0).count());
  if (cfg.group && !(true_cfg && !req.negative_prompt.empty())) {
    std::fprintf(stderr,
                 "generate-image: --cfg-parallel-size 2 without true CFG (--negative-prompt and "
                 "--true-cfg-scale > 1): rank 0 runs the one branch alone\n");
  }
  const int64_t steps = *req.num_inference_steps;
  QS_ASSIGN_OR_RETURN(
      diffusion::DiffusionOutput image,
      generate_with_progress("generate-image", *pipe, std::move(req), pool, nullptr));
  const auto t2 = clock::now();
  QS_RETURN_IF_ERROR(diffusion::write_png(flags.get("out"), image.width, image.height,
                                          diffusion::to_rgb8(image.rgb)));
  std::fprintf(stderr,
               "generate-image: %lldx%lld, %lld steps in %.2f s (%.3f s/step incl. "
               "text encoders and VAE); wrote %s\n",
               static_cast<long long>(image.width), static_cast<long long>(image.height),
               static_cast<long long>(steps), std::chrono::duration<double>(t2 - t1).count(),
               std::chrono::duration<double>(t2 - t1).count() / static_cast<double>(steps),
               flags.get("out").c_str());
  print_step_times(image);
  return ok_status();
}

}  // namespace

int cmd_generate_image(const Args& args) {
  Flags flags;
  add_revision_flag(flags);
  flags.add("model", "diffusers image pipeline directory (model_index.json: FluxPipeline)")
      .add("prompt", "the text to draw")
      .add("negative-prompt", "what to steer away from (with --true-cfg-scale > 1)")
      .add("width", "image width in pixels (FLUX.1: a multiple of 16; default 1024)")
      .add("height", "image height in pixels (FLUX.1: default 1024)")
      .add("steps", "denoising steps, num_inference_steps (FLUX.1: default 28)")
      .add("guidance-scale",
           "FLUX.1-dev's distilled guidance, its guidance embedding (default 3.5)")
      .add("true-cfg-scale",
           "> 1 with --negative-prompt: true CFG, both branches batched (or on two ranks with "
           "--cfg-parallel-size 2); default 1")
      .add("max-sequence-length", "T5 tokens (FLUX.1: default 512)")
      .add("seed", "seed of quantserve's own noise generator (not torch's)", false, "0")
      .add("noise",
           ".safetensors with the packed initial noise [n_img, channels] (overrides "
           "--seed; reproduces a diffusers run given its `latents`)")
      .add("vae-decoder",
           "full: the pipeline's vae/ (AutoencoderKL); tiny: a TAESD-family tiny autoencoder "
           "(--tiny-vae)",
           false, "full")
      .add("tiny-vae",
           "folder with the tiny decoder's <name>_decoder.pth (shipped: models/taef2, TAEF2 for "
           "32-channel FLUX.2 latents)",
           false, "models/taef2")
      .add("out", "PNG file to write")
      .add("threads",
           "worker threads (under mpirun, of each rank: by default the cores shared among the "
           "ranks on this host)",
           false, std::to_string(ThreadPool::default_threads()))
      .add("cfg-parallel-size",
           "2: run the two true-CFG branches on the two ranks of `mpirun -np 2` (vLLM-Omni's "
           "flag); rank 0 writes the image",
           false, "1");
  return run_command("generate-image", flags, args, check, run);
}

}  // namespace qs::apps
