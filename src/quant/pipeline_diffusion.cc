// quant: `quantize` on a diffusers pipeline directory (see pipeline.h). The transformer's
// blocks are planned like an LLM's decoder blocks (pipeline_plan.cc) and written through the
// same streaming export (pipeline.cc); the other components are carried over unchanged.
#include <chrono>
#include <filesystem>

#include "core/json.h"
#include "io/checkpoint.h"
#include "quant/pipeline.h"
#include "quant/staged_output.h"

namespace qs::quant {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// FluxTransformer2DModel's block lists, as auto-round's FLUX export names them.
const std::vector<std::string> kFluxBlocks = {"transformer_blocks", "single_transformer_blocks"};

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
  if (o.iters > 0 || !o.disable_opt_rtn) {
    return invalid_argument(
        o.model_dir +
        " is a diffusion pipeline: its transformer is quantized by RTN only so far (pass "
        "--iters 0 --disable_opt_rtn); AutoRound tuning and OPT-RTN run on decoder LLMs");
  }
  if (o.format != io::ExportFormat::kAutoRound) {
    return invalid_argument(
        "a diffusion pipeline's transformer is written as --format auto_round (what diffusers "
        "and vLLM-Omni load), not " +
        std::string(io::export_format_name(o.format)));
  }
  const fs::path src(o.model_dir);
  const fs::path transformer = src / "transformer";
  QS_ASSIGN_OR_RETURN(json index, read_json((src / "model_index.json").string()));
  if (!index.is_object() || !index.contains("transformer")) {
    return invalid_argument((src / "model_index.json").string() + " names no transformer");
  }
  QS_ASSIGN_OR_RETURN(json config, read_json((transformer / "config.json").string()));
  if (!config.is_object())
    return invalid_argument(transformer.string() + "/config.json: not an object");
  if (config.contains("quantization_config") ||
      fs::exists(transformer / "quantization_config.json")) {
    return invalid_argument(transformer.string() +
                            " is already quantized (quantization_config present)");
  }
  const std::string base = io::Checkpoint::base_name(transformer.string());
  QS_ASSIGN_OR_RETURN(io::Checkpoint ckpt, io::Checkpoint::open(transformer.string(), base));

  PlanTarget target;
  target.blocks = kFluxBlocks;
  for (const std::string& name : ckpt.names()) {
    const Tensor t = ckpt.get(name).value();
    if (t.shape.size() != 2 || !name.ends_with(".weight")) continue;
    target.linears.push_back({name.substr(0, name.size() - 7), t.shape[0], t.shape[1]});
  }
  QS_ASSIGN_OR_RETURN(QuantPlan plan, plan_quantization(o, target));
  QS_ASSIGN_OR_RETURN(StagedOutput out, StagedOutput::begin(o.output_dir, o.overwrite));

  std::error_code ec;
  for (const auto& e : fs::directory_iterator(src, ec)) {
    if (e.path().filename() == "transformer") continue;
    QS_RETURN_IF_ERROR(carry_over(e.path(), fs::path(out.dir()) / e.path().filename()));
  }
  if (ec) return io_error("cannot list " + src.string() + ": " + ec.message());
  const fs::path out_transformer = fs::path(out.dir()) / "transformer";
  fs::create_directories(out_transformer, ec);
  if (ec) return io_error("cannot create " + out_transformer.string() + ": " + ec.message());
  for (const auto& e : fs::directory_iterator(transformer, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || is_weight_file(name, base)) continue;
    QS_RETURN_IF_ERROR(carry_over(e.path(), out_transformer / name));
  }

  QuantizeSummary summary;
  TunedModel none;
  QS_RETURN_IF_ERROR(export_weights(ckpt, base, kFluxBlocks, o, plan, &none,
                                    out_transformer.string(), progress, cancelled, &summary));
  config["quantization_config"] = plan.quantization_config;
  QS_RETURN_IF_ERROR(write_json((out_transformer / "config.json").string(), config));
  QS_RETURN_IF_ERROR(write_json((out_transformer / "quantization_config.json").string(),
                                plan.quantization_config));
  if (cancelled && cancelled()) return io_error("interrupted; " + o.output_dir + " left as it was");
  QS_RETURN_IF_ERROR(out.commit());

  for (const LayerPlan& l : plan.layers) {
    if (!l.quantize) summary.kept.emplace_back(l.module, l.reason);
  }
  summary.scheme = scheme_name(o.spec) + " as auto_round (" + plan.parsed.format() +
                   "), RTN, transformer of the pipeline";
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace qs::quant
