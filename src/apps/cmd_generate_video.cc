// apps: `quantserve generate-video --model DIR --prompt TEXT [--negative-prompt TEXT]
// [--image FILE] [--width 832 --height 480] [--num-frames 81] [--fps F] [--steps 40]
// [--guidance-scale 5] [--guidance-scale-2 G] [--boundary-ratio R] [--flow-shift S] [--seed S]
// [--noise FILE] --out FILE.mp4 [--frames-dir DIR]`: one video from a diffusers pipeline
// directory of a video family (Wan2.2: WanPipeline, WanImageToVideoPipeline) through
// diffusion::DiffusionPipeline, with a per-step progress line and ETA on a terminal and the
// timings on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/diffusion_cli.h"
#include "apps/flags.h"
#include "apps/model_flags.h"
#include "diffusion/pipeline.h"
#include "diffusion/png_image.h"
#include "vision/image_file.h"
#include "vision/vae_image_input.h"
#include "vision/video_writer.h"

namespace qs::apps {
namespace {

Status check(const Flags& flags) {
  if (!flags.has("model")) return invalid_argument("--model DIR is required");
  if (!flags.has("prompt")) return invalid_argument("--prompt TEXT is required");
  if (!flags.has("out") && !flags.has("frames-dir")) {
    return invalid_argument("--out FILE.mp4 (or --frames-dir DIR) is required");
  }
  for (const char* f : {"width", "height", "num-frames", "steps", "seed", "max-sequence-length",
                        "threads", "crf"}) {
    QS_RETURN_IF_ERROR(flags.get_int(f).status());
  }
  for (const char* f : {"guidance-scale", "guidance-scale-2", "boundary-ratio", "flow-shift"}) {
    if (flags.has(f)) QS_RETURN_IF_ERROR(flags.get_double(f).status());
  }
  if (flags.has("fps")) QS_RETURN_IF_ERROR(flags.get_int("fps").status());
  return ok_status();
}

Status run(const Flags& flags) {
  diffusion::DiffusionRequest req;
  req.prompt = flags.get("prompt");
  req.negative_prompt = flags.get("negative-prompt");
  QS_ASSIGN_OR_RETURN(req.width, flags.get_int("width"));
  QS_ASSIGN_OR_RETURN(req.height, flags.get_int("height"));
  QS_ASSIGN_OR_RETURN(req.num_frames, flags.get_int("num-frames"));
  QS_ASSIGN_OR_RETURN(req.num_inference_steps, flags.get_int("steps"));
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
  req.seed = static_cast<uint64_t>(seed);
  QS_ASSIGN_OR_RETURN(req.max_sequence_length, flags.get_int("max-sequence-length"));
  QS_ASSIGN_OR_RETURN(req.guidance_scale, flags.get_double("guidance-scale"));
  if (flags.has("guidance-scale-2")) {
    QS_ASSIGN_OR_RETURN(req.guidance_scale_2, flags.get_double("guidance-scale-2"));
  }
  if (flags.has("boundary-ratio")) {
    QS_ASSIGN_OR_RETURN(req.boundary_ratio, flags.get_double("boundary-ratio"));
  }
  if (flags.has("flow-shift")) {
    QS_ASSIGN_OR_RETURN(req.flow_shift, flags.get_double("flow-shift"));
  }
  vision::VideoWriteOptions video;
  QS_ASSIGN_OR_RETURN(int64_t crf, flags.get_int("crf"));
  if (crf < 0 || crf > 51) return invalid_argument("--crf must be 0 to 51");
  video.crf = static_cast<int>(crf);
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  if (threads <= 0 || threads > 1024) return invalid_argument("--threads must be 1 to 1024");

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, flags.get("model")));
  QS_RETURN_IF_ERROR(
      require_pipeline_output(dir, diffusion::PipelineOutput::kVideo, "generate-video"));
  QS_ASSIGN_OR_RETURN(std::unique_ptr<diffusion::DiffusionPipeline> pipe,
                      diffusion::load_pipeline(dir));
  req = pipe->resolve(std::move(req));
  int64_t fps = pipe->default_fps();
  if (flags.has("fps")) {
    QS_ASSIGN_OR_RETURN(fps, flags.get_int("fps"));
  }
  if (fps < 1 || fps > 240) return invalid_argument("--fps must be 1 to 240");
  video.fps = static_cast<int>(fps);
  if (flags.has("image")) {
    vision::ImageReadOptions opts;
    opts.alpha = vision::AlphaMode::kDrop;  // diffusers' load_image: convert("RGB")
    QS_ASSIGN_OR_RETURN(vision::RgbImage image, vision::read_image_file(flags.get("image"), opts));
    QS_ASSIGN_OR_RETURN(req.image, vision::vae_image_input(image, *req.width, *req.height));
  }
  if (flags.has("noise")) {
    QS_ASSIGN_OR_RETURN(req.latents, read_pipeline_noise(flags.get("noise"), *pipe));
  }
  // Everything the request can get wrong, before the first step.
  QS_RETURN_IF_ERROR(pipe->validate(req));
  ThreadPool pool(static_cast<int>(threads));
  const auto t1 = clock::now();
  std::fprintf(stderr, "generate-video: loaded %s in %.2f s\n", flags.get("model").c_str(),
               std::chrono::duration<double>(t1 - t0).count());
  const int64_t steps = *req.num_inference_steps;
  GenerationTimes times;
  QS_ASSIGN_OR_RETURN(
      diffusion::DiffusionOutput v,
      generate_with_progress("generate-video", *pipe, std::move(req), pool, &times));
  const std::vector<uint8_t> rgb8 = diffusion::to_rgb8(v.rgb);
  if (flags.has("frames-dir")) {
    QS_RETURN_IF_ERROR(vision::write_png_frames(flags.get("frames-dir"), rgb8.data(), v.frames,
                                                v.height, v.width));
  }
  if (flags.has("out")) {
    QS_RETURN_IF_ERROR(
        vision::write_mp4(flags.get("out"), rgb8.data(), v.frames, v.height, v.width, video));
  }
  std::fprintf(stderr,
               "generate-video: %lldx%lld, %lld frames, %lld steps in %.2f s (step median %.3f "
               "s), VAE decode %.2f s; wrote %s\n",
               static_cast<long long>(v.width), static_cast<long long>(v.height),
               static_cast<long long>(v.frames), static_cast<long long>(steps),
               times.denoise_seconds, median(v.step_seconds), times.decode_seconds,
               flags.has("out") ? flags.get("out").c_str() : flags.get("frames-dir").c_str());
  return ok_status();
}

}  // namespace

int cmd_generate_video(const Args& args) {
  Flags flags;
  add_revision_flag(flags);
  flags
      .add("model",
           "diffusers pipeline directory (model_index.json: WanPipeline or "
           "WanImageToVideoPipeline)")
      .add("prompt", "the text to film")
      .add("negative-prompt", "the unconditional branch's prompt (with --guidance-scale > 1)")
      .add("image",
           "first frame for image to video (I2V-A14B needs one; TI2V-5B takes one), resized to "
           "the video's size as diffusers does (Lanczos)")
      .add("width", "frame width in pixels (a multiple of the VAE's scale x the patch)", false,
           "832")
      .add("height", "frame height in pixels", false, "480")
      .add("num-frames", "frames, 4k + 1", false, "81")
      .add("fps", "frames per second of the MP4 (default: the model's, A14B 16, TI2V-5B 24)")
      .add("steps", "UniPC steps (num_inference_steps)", false, std::to_string(kVideoCommandSteps))
      .add("guidance-scale", "CFG scale (> 1: two branches per step, batched)", false, "5.0")
      .add("guidance-scale-2",
           "CFG scale of transformer_2, the low-noise expert (A14B; default --guidance-scale)")
      .add("boundary-ratio",
           "timesteps >= ratio x 1000 go to transformer, below to transformer_2 (default: "
           "model_index.json's)")
      .add("flow-shift", "the scheduler's flow_shift (default: scheduler_config.json's)")
      .add("max-sequence-length", "UMT5 tokens (Wan: 512)", false, "512")
      .add("seed", "seed of quantserve's own noise generator (not torch's)", false, "0")
      .add("noise",
           ".safetensors with the initial noise [z, frames, h, w] (overrides --seed; reproduces "
           "a diffusers run given its `latents`)")
      .add("out", "MP4 file to write (H.264, yuv420p)")
      .add("frames-dir", "also (or instead) write every frame as DIR/frame_NNNN.png")
      .add("crf", "libx264 constant rate factor, 0 (lossless) to 51", false, "18")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()));
  return run_command("generate-video", flags, args, check, run);
}

}  // namespace qs::apps
