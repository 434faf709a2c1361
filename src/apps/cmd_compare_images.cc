// apps: `quantserve compare-images --reference DIR --candidate DIR --prompts FILE --seed S
// [--steps N] [--width W --height H] [--guidance-scale G] [--max-sequence-length N]
// [--out-dir DIR]`: both FLUX pipelines at the same seed and settings (hence the same initial
// noise), per prompt PSNR / SSIM / max and mean pixel error of the images and the cosine of
// the final latents; a JSON report on stdout (and in --out-dir with the side-by-side grid).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/flags.h"
#include "core/json.h"
#include "diffusion/flux_pipeline.h"
#include "diffusion/image_metrics.h"
#include "diffusion/png_image.h"
#include "io/checkpoint.h"
#include "io/hf_cache.h"

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

// JSON has no infinity: identical images report psnr_db null and "identical": true.
nlohmann::json metrics_json(const diffusion::ImageComparison& m, double cosine) {
  nlohmann::json j = {{"ssim", m.ssim},
                      {"max_abs_error", m.max_abs_error},
                      {"mean_abs_error", m.mean_abs_error},
                      {"latent_cosine_similarity", cosine},
                      {"identical", m.max_abs_error == 0}};
  j["psnr_db"] = std::isinf(m.psnr_db) ? nlohmann::json(nullptr) : nlohmann::json(m.psnr_db);
  return j;
}

Status check(const Flags& flags) {
  for (const char* f : {"reference", "candidate", "prompts"}) {
    if (!flags.has(f)) return invalid_argument(std::string("--") + f + " is required");
  }
  for (const char* f : {"seed", "steps", "width", "height", "max-sequence-length", "threads"}) {
    QS_RETURN_IF_ERROR(flags.get_int(f).status());
  }
  return flags.get_double("guidance-scale").status();
}

Status run(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(std::vector<std::string> prompts, read_prompts(flags.get("prompts")));
  diffusion::FluxRequest req;
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
  req.seed = static_cast<uint64_t>(seed);
  QS_ASSIGN_OR_RETURN(req.steps, flags.get_int("steps"));
  QS_ASSIGN_OR_RETURN(req.width, flags.get_int("width"));
  QS_ASSIGN_OR_RETURN(req.height, flags.get_int("height"));
  QS_ASSIGN_OR_RETURN(req.max_sequence_length, flags.get_int("max-sequence-length"));
  QS_ASSIGN_OR_RETURN(req.guidance_scale, flags.get_double("guidance-scale"));
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  if (threads <= 0 || threads > 1024) return invalid_argument("--threads must be 1 to 1024");
  // Either may be a repo id in the Hugging Face cache (at main), as --model elsewhere.
  QS_ASSIGN_OR_RETURN(const std::string reference_dir,
                      io::resolve_model_dir(flags.get("reference")));
  QS_ASSIGN_OR_RETURN(const std::string candidate_dir,
                      io::resolve_model_dir(flags.get("candidate")));
  QS_ASSIGN_OR_RETURN(auto reference, diffusion::FluxPipeline::load(reference_dir));
  QS_ASSIGN_OR_RETURN(auto candidate, diffusion::FluxPipeline::load(candidate_dir));
  ThreadPool pool(static_cast<int>(threads));

  nlohmann::json per_prompt = nlohmann::json::array();
  std::vector<std::vector<uint8_t>> ref_images, cand_images;
  double ssim_sum = 0, cos_sum = 0, psnr_min = INFINITY;
  int max_err = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    req.prompt = prompts[i];
    QS_ASSIGN_OR_RETURN(diffusion::FluxImage a, reference->generate(req, pool));
    QS_ASSIGN_OR_RETURN(diffusion::FluxImage b, candidate->generate(req, pool));
    ref_images.push_back(diffusion::to_rgb8(a.rgb));
    cand_images.push_back(diffusion::to_rgb8(b.rgb));
    const auto m =
        diffusion::compare_images(ref_images.back(), cand_images.back(), req.width, req.height);
    const double cos = diffusion::cosine_similarity(a.latents, b.latents);
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
       {{"seed", seed},
        {"num_inference_steps", req.steps},
        {"width", req.width},
        {"height", req.height},
        {"guidance_scale", req.guidance_scale},
        {"max_sequence_length", req.max_sequence_length}}},
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
        diffusion::side_by_side_grid(ref_images, cand_images, req.width, req.height, &gw, &gh);
    QS_RETURN_IF_ERROR(diffusion::write_png(dir + "/grid.png", gw, gh, grid));
    QS_RETURN_IF_ERROR(write_json(dir + "/report.json", report));
    std::fprintf(stderr, "compare-images: wrote %s/report.json and %s/grid.png\n", dir.c_str(),
                 dir.c_str());
  }
  std::printf("%s\n", report.dump(2).c_str());
  return ok_status();
}

}  // namespace

int cmd_compare_images(const Args& args) {
  Flags flags;
  flags.add("reference", "reference pipeline directory or repo id (e.g. the bf16 one)")
      .add("candidate", "candidate pipeline directory or repo id (e.g. its W4A16 transformer)")
      .add("prompts", "text file, one prompt per line")
      .add("seed", "seed of the shared initial noise", false, "0")
      .add("steps", "flow-matching steps", false, "28")
      .add("width", "image width", false, "1024")
      .add("height", "image height", false, "1024")
      .add("guidance-scale", "distilled guidance", false, "3.5")
      .add("max-sequence-length", "T5 tokens", false, "512")
      .add("out-dir", "also write report.json and grid.png (reference | candidate per row) here")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()));
  return run_command("compare-images", flags, args, check, run);
}

}  // namespace qs::apps
