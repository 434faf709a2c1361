// quant: `quantize` on a diffusers pipeline directory (see pipeline.h): FLUX.1's transformer,
// Wan2.2's (both experts of A14B). Each transformer's blocks are planned like an LLM's decoder
// blocks (pipeline_plan.cc), RTN or, for Wan with --iters > 0, AutoRound-tuned on prompts run
// through the pipeline (wan_tuner.h), and written through the same streaming export
// (pipeline.cc); the other components are carried over unchanged.
#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/json.h"
#include "diffusion/pipeline_index.h"
#include "diffusion/pipeline_registry.h"
#include "io/checkpoint.h"
#include "quant/pipeline.h"
#include "quant/staged_output.h"
#include "quant/wan_tuner.h"

namespace qs::quant {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The block lists of the transformer's class, as the pipeline registry gives them (auto-round's
// export names: FluxTransformer2DModel's two kinds of blocks, WanTransformer3DModel's one).
Result<std::vector<std::string>> transformer_blocks(const json& config, const fs::path& dir) {
  const std::string cls =
      config.is_object() && config.contains("_class_name") && config["_class_name"].is_string()
          ? config["_class_name"].get<std::string>()
          : std::string();
  if (const std::vector<std::string>* blocks = diffusion::transformer_block_lists(cls)) {
    return *blocks;
  }
  std::string known;
  for (const diffusion::PipelineFamilySpec& f : diffusion::pipeline_families()) {
    for (const auto& t : f.transformer_blocks) known += (known.empty() ? "" : " and ") + t.first;
  }
  return unimplemented(dir.string() + "/config.json: _class_name \"" + cls + "\" (quantize knows " +
                       known + ")");
}

// A component copied into the staged output: files hard-linked when source and target share a
// filesystem (a real T5 encoder is 9 GB), copied otherwise. A Hugging Face cache snapshot holds
// relative symlinks into blobs/, and link(2) links the symlink itself (dangling in the output),
// so the file it points to is linked instead.
Status carry_over(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (fs::is_directory(from, ec)) {
    fs::create_directories(to, ec);
    if (ec) return io_error("cannot create " + to.string() + ": " + ec.message());
    for (const auto& e : fs::directory_iterator(from, ec)) {
      QS_RETURN_IF_ERROR(carry_over(e.path(), to / e.path().filename()));
    }
    if (ec) return io_error("cannot list " + from.string() + ": " + ec.message());
    return ok_status();
  }
  const fs::path target = fs::is_symlink(from, ec) ? fs::canonical(from, ec) : from;
  if (ec) return io_error("cannot follow the link " + from.string() + ": " + ec.message());
  fs::create_hard_link(target, to, ec);
  if (!ec) return ok_status();
  ec.clear();
  fs::copy_file(from, to, ec);
  if (ec) return io_error("cannot copy " + from.string() + ": " + ec.message());
  return ok_status();
}

bool is_weight_file(const std::string& name, const std::string& base) {
  return name.rfind(base + ".safetensors", 0) == 0 ||
         (name.ends_with(".safetensors") && name.find("-of-") != std::string::npos);
}

}  // namespace

Result<QuantizeSummary> quantize_pipeline(const QuantizeOptions& o, const ProgressFn& progress,
                                          const std::function<bool()>& cancelled) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.iters == 0 && !o.disable_opt_rtn) {
    return invalid_argument(o.model_dir +
                            " is a diffusion pipeline: OPT-RTN (--iters 0 without "
                            "--disable_opt_rtn) runs on decoder LLMs; pass --disable_opt_rtn for "
                            "RTN, or --iters > 0 for AutoRound (Wan pipelines)");
  }
  if (o.format != io::ExportFormat::kAutoRound) {
    return invalid_argument(
        "a diffusion pipeline's transformer is written as --format auto_round (what diffusers "
        "and vLLM-Omni load), not " +
        std::string(io::export_format_name(o.format)));
  }
  const fs::path src(o.model_dir);
  QS_ASSIGN_OR_RETURN(diffusion::PipelineIndex index, diffusion::read_pipeline_index(src.string()));
  // The denoisers: `transformer`, and Wan2.2 A14B's second expert `transformer_2`.
  const std::vector<std::string> names = index.transformers();
  if (names.empty()) {
    return invalid_argument((src / "model_index.json").string() + " names no transformer");
  }
  const bool tuning = o.iters > 0;
  struct Denoiser {
    std::string name;
    json config;
    std::vector<std::string> blocks;
    std::string base;
    io::Checkpoint ckpt;
    QuantPlan plan;
  };
  std::vector<Denoiser> denoisers;
  for (const std::string& name : names) {
    const fs::path dir = src / name;
    Denoiser d;
    d.name = name;
    QS_ASSIGN_OR_RETURN(d.config, read_json((dir / "config.json").string()));
    if (!d.config.is_object())
      return invalid_argument(dir.string() + "/config.json: not an object");
    if (d.config.contains("quantization_config") || fs::exists(dir / "quantization_config.json")) {
      return invalid_argument(dir.string() + " is already quantized (quantization_config present)");
    }
    QS_ASSIGN_OR_RETURN(d.blocks, transformer_blocks(d.config, dir));
    if (tuning && d.config.value("_class_name", "") != "WanTransformer3DModel") {
      return invalid_argument(
          o.model_dir +
          ": AutoRound tuning (--iters > 0) of a diffusion pipeline runs on Wan transformers; "
          "this one's transformer is quantized by RTN only so far (pass --iters 0 "
          "--disable_opt_rtn)");
    }
    d.base = io::Checkpoint::base_name(dir.string());
    QS_ASSIGN_OR_RETURN(d.ckpt, io::Checkpoint::open(dir.string(), d.base));
    PlanTarget target;
    target.blocks = d.blocks;
    for (const std::string& tensor : d.ckpt.names()) {
      const Tensor t = d.ckpt.get(tensor).value();
      if (t.shape.size() != 2 || !tensor.ends_with(".weight")) continue;
      target.linears.push_back({tensor.substr(0, tensor.size() - 7), t.shape[0], t.shape[1]});
    }
    QS_ASSIGN_OR_RETURN(d.plan, plan_quantization(o, target));
    denoisers.push_back(std::move(d));
  }
  // AutoRound: calibration through the pipeline, then block by block per transformer
  // (wan_tuner.h); the tuned weights replace RTN's in the export below.
  WanTuned tuned;
  if (tuning) {
    std::vector<const QuantPlan*> plans;
    for (const Denoiser& d : denoisers) plans.push_back(&d.plan);
    QS_ASSIGN_OR_RETURN(tuned,
                        tune_wan_pipeline(o, names, plans, WanCalibrationSettings(), cancelled));
  } else {
    tuned.models.resize(denoisers.size());
  }
  QS_ASSIGN_OR_RETURN(StagedOutput out, StagedOutput::begin(o.output_dir, o.overwrite));

  std::error_code ec;
  for (const auto& e : fs::directory_iterator(src, ec)) {
    const std::string top = e.path().filename().string();
    if (std::find(names.begin(), names.end(), top) != names.end()) continue;
    QS_RETURN_IF_ERROR(carry_over(e.path(), fs::path(out.dir()) / e.path().filename()));
  }
  if (ec) return io_error("cannot list " + src.string() + ": " + ec.message());

  QuantizeSummary summary;
  for (size_t di = 0; di < denoisers.size(); ++di) {
    Denoiser& d = denoisers[di];
    const fs::path in_dir = src / d.name;
    const fs::path out_dir = fs::path(out.dir()) / d.name;
    fs::create_directories(out_dir, ec);
    if (ec) return io_error("cannot create " + out_dir.string() + ": " + ec.message());
    for (const auto& e : fs::directory_iterator(in_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name == "config.json" || is_weight_file(name, d.base)) continue;
      QS_RETURN_IF_ERROR(carry_over(e.path(), out_dir / name));
    }
    TunedModel& model = tuned.models[di];
    for (BlockReport& r : model.blocks) summary.blocks.push_back(r);
    QS_RETURN_IF_ERROR(export_weights(d.ckpt, d.base, d.blocks, o, d.plan, &model, out_dir.string(),
                                      progress, cancelled, &summary));
    d.config["quantization_config"] = d.plan.quantization_config;
    QS_RETURN_IF_ERROR(write_json((out_dir / "config.json").string(), d.config));
    QS_RETURN_IF_ERROR(
        write_json((out_dir / "quantization_config.json").string(), d.plan.quantization_config));
  }
  if (cancelled && cancelled()) return io_error("interrupted; " + o.output_dir + " left as it was");
  QS_RETURN_IF_ERROR(out.commit());

  const QuantPlan& plan = denoisers.front().plan;
  for (const Denoiser& d : denoisers) {
    for (const LayerPlan& l : d.plan.layers) {
      const std::string where = denoisers.size() > 1 ? d.name + "." + l.module : l.module;
      if (!l.quantize) summary.kept.emplace_back(where, l.reason);
    }
  }
  summary.scheme = scheme_name(o.spec) + " as auto_round (" + plan.parsed.format() + "), " +
                   (tuning ? "AutoRound (--iters " + std::to_string(o.iters) + ")" : "RTN") + ", " +
                   (denoisers.size() > 1 ? "both transformers" : "transformer") +
                   " of the pipeline";
  summary.calibration = tuned.calibration;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace qs::quant
