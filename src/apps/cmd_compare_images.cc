// apps: `quantserve compare-images --reference DIR --candidate DIR --prompts FILE --seed S
// [--task t2i|t2v] [--steps N] [--width W --height H] [--guidance-scale G]
// [--max-sequence-length N] [--out-dir DIR]`: both pipelines at the same seed and settings
// (hence the same initial noise), per prompt PSNR / SSIM / max and mean pixel error of the
// outputs and the cosine of the final latents; a JSON report on stdout (and in --out-dir with
// the pictures). --task as vLLM-Omni's compare_diffusion_trajectory_similarity names it: t2i
// (the default) compares image pipelines' images (FLUX.1), side by side in grid.png; t2v
// compares video pipelines' videos (Wan2.2; [--num-frames F] [--negative-prompt T]
// [--guidance-scale-2 G] [--boundary-ratio R] [--flow-shift S], as generate-video takes them)
// frame by frame, with the figures over the frames and a strip per prompt (reference frames
// above the candidate's). Both sides run through diffusion::DiffusionPipeline, one after the
// other (the reference is freed before the candidate loads).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/diffusion_cli.h"
#include "apps/flags.h"
#include "core/json.h"
#include "diffusion/image_metrics.h"
#include "diffusion/pipeline.h"
#include "diffusion/pipeline_registry.h"
#include "diffusion/png_image.h"
#include "io/checkpoint.h"
#include "io/hf_cache.h"
#include "vision/image_file.h"
#include "vision/vae_image_input.h"

namespace qs::apps {
namespace {

Result<std::vector<std::string>> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open the prompts file");
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty()) return invalid_argument(path + ": no prompts (one per line)");
  if (prompts.size() > 1000) return invalid_argument(path + ": more than 1000 prompts");
  return prompts;
}

// JSON has no infinity: an infinite PSNR (identical pictures) is null.
nlohmann::json db_json(double psnr_db) {
  return std::isinf(psnr_db) ? nlohmann::json(nullptr) : nlohmann::json(psnr_db);
}

// One picture pair: identical ones report psnr_db null and "identical": true.
nlohmann::json image_json(const diffusion::ImageComparison& m) {
  return {{"ssim", m.ssim},
          {"max_abs_error", m.max_abs_error},
          {"mean_abs_error", m.mean_abs_error},
          {"identical", m.max_abs_error == 0},
          {"psnr_db", db_json(m.psnr_db)}};
}

nlohmann::json metrics_json(const diffusion::ImageComparison& m, double cosine) {
  nlohmann::json j = image_json(m);
  j["latent_cosine_similarity"] = cosine;
  return j;
}

// The output a task compares: t2i images, t2v videos.
diffusion::PipelineOutput task_output(const std::string& task) {
  return task == "t2v" ? diffusion::PipelineOutput::kVideo : diffusion::PipelineOutput::kImage;
}

// Both directories must hold pipelines of the task's output, checked before either loads.
Status require_output(const std::string& dir, const char* flag, const std::string& task) {
  QS_ASSIGN_OR_RETURN(const diffusion::PipelineIndex index, diffusion::read_pipeline_index(dir));
  const diffusion::PipelineOutput want = task_output(task);
  if (index.family->output == want) return ok_status();
  const bool video = index.family->output == diffusion::PipelineOutput::kVideo;
  return invalid_argument(std::string("--") + flag + " " + dir + " is a " + index.class_name +
                          " (" + index.family->name + ", " +
                          diffusion::pipeline_output_name(index.family->output) + "), but --task " +
                          task + " compares " + diffusion::pipeline_output_name(want) +
                          " pipelines; use --task " + (video ? "t2v" : "t2i"));
}

constexpr const char* kVideoFlags[] = {"num-frames",     "negative-prompt", "guidance-scale-2",
                                       "boundary-ratio", "flow-shift",      "strip-frames",
                                       "image"};

Status check(const Flags& flags) {
  for (const char* f : {"reference", "candidate", "prompts"}) {
    if (!flags.has(f)) return invalid_argument(std::string("--") + f + " is required");
  }
  const std::string task = flags.get("task");
  if (task != "t2i" && task != "t2v") {
    return invalid_argument(
        "--task must be t2i (image pipelines) or t2v (video pipelines), not \"" + task + "\"");
  }
  for (const char* f : kVideoFlags) {
    if (task == "t2i" && flags.has(f)) {
      return invalid_argument(std::string("--") + f + " applies to --task t2v");
    }
  }
  for (const char* f : {"seed", "steps", "width", "height", "max-sequence-length", "threads",
                        "num-frames", "strip-frames"}) {
    if (flags.has(f)) QS_RETURN_IF_ERROR(flags.get_int(f).status());
  }
  for (const char* f : {"guidance-scale", "guidance-scale-2", "boundary-ratio", "flow-shift"}) {
    if (flags.has(f)) QS_RETURN_IF_ERROR(flags.get_double(f).status());
  }
  return ok_status();
}

// What makes two pipelines comparable: the same pipeline class and transformers (the candidate
// is the reference quantized) and the same VAE, which sets the latent grid.
Result<std::string> model_summary(const std::string& dir) {
  QS_ASSIGN_OR_RETURN(const diffusion::PipelineIndex index, diffusion::read_pipeline_index(dir));
  std::string out = index.class_name +
                    (index.flag("expand_timesteps") ? " with expand_timesteps" : "") + ", " +
                    std::to_string(index.transformers().size()) + " transformer(s)";
  QS_ASSIGN_OR_RETURN(const std::string vae_dir, index.component_dir("vae"));
  QS_ASSIGN_OR_RETURN(const nlohmann::json vae, read_json(vae_dir + "/config.json"));
  out += ", VAE " + json_string_or(vae, "_class_name", "?");
  for (const char* key :
       {"z_dim", "latent_channels", "scale_factor_spatial", "scale_factor_temporal"}) {
    if (vae.contains(key)) out += std::string(" ") + key + " " + vae[key].dump();
  }
  return out;
}

// The flags as a request; those not given are the pipelines' defaults, except the steps of a
// video, generate-video's 40.
Result<diffusion::DiffusionRequest> request_from_flags(const Flags& flags, bool video) {
  diffusion::DiffusionRequest req;
  req.negative_prompt = flags.get("negative-prompt");
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
  req.seed = static_cast<uint64_t>(seed);
  if (video) req.num_inference_steps = kVideoCommandSteps;
  for (auto [name, field] :
       {std::pair{"steps", &req.num_inference_steps}, std::pair{"width", &req.width},
        std::pair{"height", &req.height}, std::pair{"num-frames", &req.num_frames},
        std::pair{"max-sequence-length", &req.max_sequence_length}}) {
    if (flags.has(name)) {
      QS_ASSIGN_OR_RETURN(*field, flags.get_int(name));
    }
  }
  for (auto [name, field] : {std::pair{"guidance-scale", &req.guidance_scale},
                             std::pair{"guidance-scale-2", &req.guidance_scale_2},
                             std::pair{"boundary-ratio", &req.boundary_ratio},
                             std::pair{"flow-shift", &req.flow_shift}}) {
    if (flags.has(name)) {
      QS_ASSIGN_OR_RETURN(*field, flags.get_double(name));
    }
  }
  return req;
}

// One side of a comparison: its pipeline loaded, every prompt generated, and dropped before the
// other side loads (two A14B pipelines would not fit in memory at once).
struct Runs {
  std::vector<std::vector<uint8_t>> frames;  // per prompt [F, H, W, 3]
  std::vector<std::vector<float>> latents;   // per prompt, the final latents
  std::vector<int64_t> latents_shape;
  diffusion::DiffusionRequest resolved;  // the settings the runs used
  double seconds = 0;
};

// `image`: a first frame to prepare at the resolved size (empty: none). `shape`: the reference's
// latent shape, which the candidate's must equal (empty for the reference).
Result<Runs> generate_runs(const std::string& dir, const std::vector<std::string>& prompts,
                           diffusion::DiffusionRequest req, const vision::RgbImage* image,
                           const std::vector<int64_t>& shape, ThreadPool& pool) {
  QS_ASSIGN_OR_RETURN(std::unique_ptr<diffusion::DiffusionPipeline> pipe,
                      diffusion::load_pipeline(dir));
  req = pipe->resolve(std::move(req));
  if (image) {
    // The same first frame for both sides, prepared as generate-video prepares it.
    QS_ASSIGN_OR_RETURN(req.image, vision::vae_image_input(*image, *req.width, *req.height));
  }
  QS_RETURN_IF_ERROR(pipe->validate(req).with_context(dir));
  Runs runs;
  runs.latents_shape = pipe->latents_shape(req);
  if (!shape.empty() && shape != runs.latents_shape) {
    return invalid_argument(dir + ": its latents are " + shape_string(runs.latents_shape) +
                            ", the reference's " + shape_string(shape) +
                            ": the pipelines are not the same model (compare a model with its "
                            "own quantization)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    req.prompt = prompts[i];
    QS_ASSIGN_OR_RETURN(diffusion::DiffusionOutput out, pipe->generate(req, pool));
    runs.frames.push_back(diffusion::to_rgb8(out.rgb));
    runs.latents.push_back(std::move(out.latents));
    std::fprintf(stderr, "compare-images: %s %zu/%zu generated\n", dir.c_str(), i + 1,
                 prompts.size());
  }
  runs.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  req.prompt.clear();
  req.image.clear();
  runs.resolved = std::move(req);
  return runs;
}

Status report_images(const Flags& flags, const std::vector<std::string>& prompts, const Runs& ref,
                     const Runs& cand) {
  const diffusion::DiffusionRequest& req = ref.resolved;  // every size field set
  const int64_t width = *req.width, height = *req.height;
  nlohmann::json per_prompt = nlohmann::json::array();
  double ssim_sum = 0, cos_sum = 0, psnr_min = INFINITY;
  int max_err = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto m = diffusion::compare_images(ref.frames[i], cand.frames[i], width, height);
    const double cos = diffusion::cosine_similarity(ref.latents[i], cand.latents[i]);
    nlohmann::json row = metrics_json(m, cos);
    row["prompt"] = prompts[i];
    per_prompt.push_back(row);
    ssim_sum += m.ssim, cos_sum += cos, psnr_min = std::min(psnr_min, m.psnr_db);
    max_err = std::max(max_err, m.max_abs_error);
    std::fprintf(stderr,
                 "compare-images: %zu/%zu  PSNR %.2f dB  SSIM %.4f  max err %d  "
                 "latent cos %.6f\n",
                 i + 1, prompts.size(), m.psnr_db, m.ssim, m.max_abs_error, cos);
  }
  const double n = static_cast<double>(prompts.size());
  nlohmann::json report = {
      {"reference", flags.get("reference")},
      {"candidate", flags.get("candidate")},
      {"settings",
       {{"seed", req.seed},
        {"num_inference_steps", *req.num_inference_steps},
        {"width", width},
        {"height", height},
        {"guidance_scale", req.guidance_scale.value_or(0.0)},
        {"max_sequence_length", *req.max_sequence_length}}},
      {"per_prompt", per_prompt},
      {"summary",
       {{"mean_ssim", ssim_sum / n},
        {"min_psnr_db", std::isinf(psnr_min) ? nlohmann::json(nullptr) : nlohmann::json(psnr_min)},
        {"max_abs_error", max_err},
        {"mean_latent_cosine_similarity", cos_sum / n}}}};
  if (flags.has("out-dir")) {
    const std::string dir = flags.get("out-dir");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status(StatusCode::kIo, dir + ": " + ec.message());
    int64_t gw = 0, gh = 0;
    const auto grid =
        diffusion::side_by_side_grid(ref.frames, cand.frames, width, height, &gw, &gh);
    QS_RETURN_IF_ERROR(diffusion::write_png(dir + "/grid.png", gw, gh, grid));
    QS_RETURN_IF_ERROR(write_json(dir + "/report.json", report));
    std::fprintf(stderr, "compare-images: wrote %s/report.json and %s/grid.png\n", dir.c_str(),
                 dir.c_str());
  }
  std::printf("%s\n", report.dump(2).c_str());
  return ok_status();
}

Status report_videos(const Flags& flags, const std::vector<std::string>& prompts, const Runs& ref,
                     const Runs& cand, int64_t strip_frames) {
  const diffusion::DiffusionRequest& req = ref.resolved;  // every size field set
  const int64_t width = *req.width, height = *req.height, frames_n = *req.num_frames;
  const std::string out_dir = flags.get("out-dir");
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) return Status(StatusCode::kIo, out_dir + ": " + ec.message());
  }
  const std::vector<int64_t> shown = diffusion::evenly_spaced_frames(frames_n, strip_frames);
  nlohmann::json per_prompt = nlohmann::json::array();
  double ssim_sum = 0, cos_sum = 0, psnr_min = INFINITY, ssim_min = INFINITY, cos_min = INFINITY;
  int max_err = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const diffusion::VideoComparison m =
        diffusion::compare_videos(ref.frames[i], cand.frames[i], frames_n, width, height);
    const double cos = diffusion::cosine_similarity(ref.latents[i], cand.latents[i]);
    nlohmann::json frames = nlohmann::json::array();
    for (size_t f = 0; f < m.frames.size(); ++f) {
      nlohmann::json row = image_json(m.frames[f]);
      row["frame"] = f;
      frames.push_back(row);
    }
    nlohmann::json row = {{"prompt", prompts[i]},
                          {"frames", frames_n},
                          {"psnr_db", db_json(m.psnr_db)},
                          {"psnr_db_mean", db_json(m.psnr_db_mean)},
                          {"psnr_db_min", db_json(m.psnr_db_min)},
                          {"ssim_mean", m.ssim_mean},
                          {"ssim_min", m.ssim_min},
                          {"max_abs_error", m.max_abs_error},
                          {"mean_abs_error", m.mean_abs_error},
                          {"identical", m.max_abs_error == 0},
                          {"latent_cosine_similarity", cos},
                          {"per_frame", frames}};
    if (!out_dir.empty()) {
      char name[32];
      std::snprintf(name, sizeof(name), "strip_%03zu.png", i);
      int64_t sw = 0, sh = 0;
      const auto strip =
          diffusion::video_strip(ref.frames[i], cand.frames[i], shown, width, height, &sw, &sh);
      QS_RETURN_IF_ERROR(diffusion::write_png(out_dir + "/" + name, sw, sh, strip));
      row["strip"] = name;
    }
    per_prompt.push_back(row);
    ssim_sum += m.ssim_mean, cos_sum += cos;
    psnr_min = std::min(psnr_min, m.psnr_db_min), ssim_min = std::min(ssim_min, m.ssim_min);
    cos_min = std::min(cos_min, cos), max_err = std::max(max_err, m.max_abs_error);
    std::fprintf(stderr,
                 "compare-images: %zu/%zu  PSNR %.2f dB (frames: mean %.2f, min %.2f)  SSIM "
                 "mean %.4f min %.4f  max err %d  latent cos %.6f\n",
                 i + 1, prompts.size(), m.psnr_db, m.psnr_db_mean, m.psnr_db_min, m.ssim_mean,
                 m.ssim_min, m.max_abs_error, cos);
  }
  const double n = static_cast<double>(prompts.size());
  auto optional = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json report = {
      {"task", "t2v"},
      {"reference", flags.get("reference")},
      {"candidate", flags.get("candidate")},
      {"settings",
       {{"seed", req.seed},
        {"num_inference_steps", *req.num_inference_steps},
        {"width", width},
        {"height", height},
        {"num_frames", frames_n},
        {"guidance_scale", optional(req.guidance_scale)},
        {"guidance_scale_2", optional(req.guidance_scale_2)},
        {"boundary_ratio", optional(req.boundary_ratio)},
        {"flow_shift", optional(req.flow_shift)},
        {"negative_prompt", req.negative_prompt},
        {"max_sequence_length", *req.max_sequence_length}}},
      {"strip_frames", shown},
      {"generation_seconds", {{"reference", ref.seconds}, {"candidate", cand.seconds}}},
      {"per_prompt", per_prompt},
      {"summary",
       {{"mean_ssim", ssim_sum / n},
        {"min_ssim", ssim_min},
        {"min_psnr_db", db_json(psnr_min)},
        {"max_abs_error", max_err},
        {"mean_latent_cosine_similarity", cos_sum / n},
        {"min_latent_cosine_similarity", cos_min}}}};
  if (!out_dir.empty()) {
    QS_RETURN_IF_ERROR(write_json(out_dir + "/report.json", report));
    std::fprintf(stderr, "compare-images: wrote %s/report.json and %zu strips\n", out_dir.c_str(),
                 prompts.size());
  }
  std::printf("%s\n", report.dump(2).c_str());
  return ok_status();
}

Status run(const Flags& flags) {
  const std::string task = flags.get("task");
  const bool video = task_output(task) == diffusion::PipelineOutput::kVideo;
  QS_ASSIGN_OR_RETURN(std::vector<std::string> prompts, read_prompts(flags.get("prompts")));
  QS_ASSIGN_OR_RETURN(diffusion::DiffusionRequest req, request_from_flags(flags, video));
  std::optional<vision::RgbImage> image;
  if (flags.has("image")) {
    vision::ImageReadOptions opts;
    opts.alpha = vision::AlphaMode::kDrop;  // diffusers' load_image: convert("RGB")
    QS_ASSIGN_OR_RETURN(image, vision::read_image_file(flags.get("image"), opts));
  }
  QS_ASSIGN_OR_RETURN(int64_t strip_frames, flags.get_int("strip-frames"));
  if (strip_frames < 1 || strip_frames > 64) {
    return invalid_argument("--strip-frames must be 1 to 64");
  }
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  if (threads <= 0 || threads > 1024) return invalid_argument("--threads must be 1 to 1024");
  // Either may be a repo id in the Hugging Face cache (at main), as --model elsewhere.
  QS_ASSIGN_OR_RETURN(const std::string reference_dir,
                      io::resolve_model_dir(flags.get("reference")));
  QS_ASSIGN_OR_RETURN(const std::string candidate_dir,
                      io::resolve_model_dir(flags.get("candidate")));
  for (const auto& [dir, flag] :
       {std::pair{reference_dir, "reference"}, {candidate_dir, "candidate"}}) {
    QS_RETURN_IF_ERROR(require_output(dir, flag, task));
  }
  // Found here, before the reference's runs rather than after them.
  QS_ASSIGN_OR_RETURN(const std::string ref_model, model_summary(reference_dir));
  QS_ASSIGN_OR_RETURN(const std::string cand_model, model_summary(candidate_dir));
  if (ref_model != cand_model) {
    return invalid_argument("the pipelines are different models (reference: " + ref_model +
                            "; candidate: " + cand_model +
                            "): their outputs cannot be compared; compare a model with its own "
                            "quantization");
  }
  ThreadPool pool(static_cast<int>(threads));
  const vision::RgbImage* first_frame = image ? &*image : nullptr;
  QS_ASSIGN_OR_RETURN(Runs ref, generate_runs(reference_dir, prompts, req, first_frame, {}, pool));
  QS_ASSIGN_OR_RETURN(
      Runs cand, generate_runs(candidate_dir, prompts, req, first_frame, ref.latents_shape, pool));
  return video ? report_videos(flags, prompts, ref, cand, strip_frames)
               : report_images(flags, prompts, ref, cand);
}

}  // namespace

int cmd_compare_images(const Args& args) {
  Flags flags;
  flags.add("reference", "reference pipeline directory or repo id (e.g. the bf16 one)")
      .add("candidate", "candidate pipeline directory or repo id (e.g. its W4A16 transformer)")
      .add("prompts", "text file, one prompt per line")
      .add("task",
           "t2i: image pipelines' images (FLUX.1); t2v: video pipelines' videos (Wan2.2); "
           "vLLM-Omni's compare tool's --task",
           false, "t2i")
      .add("seed", "seed of the shared initial noise", false, "0")
      .add("steps", "sampling steps (default: the pipeline's, FLUX.1 28; t2v: 40)")
      .add("width", "image or frame width (default: the pipeline's, FLUX.1 1024, Wan2.2 832)")
      .add("height", "image or frame height (default: the pipeline's, FLUX.1 1024, Wan2.2 480)")
      .add("guidance-scale",
           "FLUX.1: distilled guidance (default 3.5); Wan2.2: the CFG scale (default 5)")
      .add("max-sequence-length", "T5 / UMT5 tokens (default 512)")
      .add("num-frames", "t2v: frames of each video, 4k + 1", false, "81")
      .add("negative-prompt", "t2v: the unconditional branch's prompt")
      .add("guidance-scale-2", "t2v: CFG scale of transformer_2 (A14B; default --guidance-scale)")
      .add("boundary-ratio", "t2v: the experts' boundary (default: model_index.json's)")
      .add("flow-shift", "t2v: the scheduler's flow_shift (default: scheduler_config.json's)")
      .add("image", "t2v: the first frame of image-to-video pipelines (I2V-A14B, TI2V-5B)")
      .add("strip-frames", "t2v: frames shown per strip in --out-dir, evenly spaced", false, "8")
      .add("out-dir",
           "also write report.json and the pictures here: t2i grid.png (reference | candidate "
           "per row), t2v strip_NNN.png per prompt (reference frames above the candidate's)")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()));
  return run_command("compare-images", flags, args, check, run);
}

}  // namespace qs::apps
