// apps: `quantserve inspect DIR [--json] [--quantization NAME]`: what a checkpoint directory
// holds (architecture, hyper-parameters, tensors, dtypes, bytes), computed by
// io/checkpoint_summary. A quantized checkpoint is also loaded, so that every layer is shown
// with its stored scheme, the kernel that runs it and its stored/resident/bf16 bytes; so is a
// 16-bit one under --lm-head-dtype int8 (the table then shows lm_head's int8 kernel).
// A diffusers pipeline directory (or a FLUX transformer/ folder) is sized instead
// (diffusion/pipeline_memory.h): resident bytes per component and the peak of one step at
// --width x --height (a Wan video's also at --num-frames, with its VAE decode), from the
// components' configs alone when their weights are not there.
// A multimodal model (Qwen2.5-VL, Qwen2.5-Omni's thinker or the whole Qwen2.5-Omni) also gets
// its parts' resident bytes in bf16 and W4A16 (apps/inspect_multimodal.h), from config.json
// alone when the weights are not there.
#include <cstdio>
#include <filesystem>
#include <optional>

#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/inspect_multimodal.h"
#include "apps/model_flags.h"
#include "core/json.h"
#include "diffusion/pipeline_index.h"
#include "diffusion/pipeline_memory.h"
#include "io/checkpoint.h"
#include "io/checkpoint_summary.h"
#include "io/quant_config.h"
#include "models/model.h"
#include "models/model_config.h"

namespace qs::apps {
namespace {

// Loads the model as `generate` would and describes each of its matmuls.
Status add_loaded_linears(const std::string& dir, const Flags& flags,
                          io::CheckpointSummary* summary) {
  QS_ASSIGN_OR_RETURN(const models::LoadOptions load, load_options_from_flags(flags));
  QS_ASSIGN_OR_RETURN(auto model, models::Model::load(dir, load));
  QS_ASSIGN_OR_RETURN(io::Checkpoint ckpt, io::Checkpoint::open(dir));
  const std::vector<std::string> names = ckpt.names();  // sorted
  std::vector<io::LinearReport> reports;
  for (const models::LinearInfo& info : model->linears()) {
    io::LinearReport r;
    r.name = info.name;
    r.scheme = info.scheme.describe();
    r.kernel = info.weight->kernel();
    r.quantized = info.scheme.quantized();
    r.n = info.weight->rows();
    r.k = info.weight->cols();
    r.stored_bytes = info.stored_bytes;
    r.resident_bytes = info.weight->resident_bytes();
    // The module's stored tensors are "<name>.<suffix>"; the bias is a parameter of its own.
    const std::string prefix = info.name + ".";
    for (auto it = std::lower_bound(names.begin(), names.end(), prefix);
         it != names.end() && it->compare(0, prefix.size(), prefix) == 0; ++it) {
      if (it->find('.', prefix.size()) != std::string::npos || *it == prefix + "bias") continue;
      QS_ASSIGN_OR_RETURN(Tensor t, ckpt.get(*it));
      r.stored_elements += t.numel();
    }
    reports.push_back(std::move(r));
  }
  io::set_loaded_linears(summary, std::move(reports), model->resident_weight_bytes());
  summary->decode_bytes_per_token = model->decode_weight_bytes();
  return ok_status();
}

bool is_diffusion_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(dir) / "model_index.json")) return true;
  auto config = read_json((fs::path(dir) / "config.json").string());
  return config.ok() && config->is_object() &&
         config->value("_class_name", "") == "FluxTransformer2DModel";
}

// Sizes not given are the family's defaults (FLUX.1 a 1024x1024 image, Wan2.2 an 832x480
// video of 81 frames), which its registered sizer fills in.
Status run_pipeline(const std::string& dir, const Flags& flags) {
  diffusion::PipelineOutput output = diffusion::PipelineOutput::kImage;  // a FLUX transformer/
  std::string class_name;
  if (diffusion::is_pipeline_dir(dir)) {
    QS_ASSIGN_OR_RETURN(const diffusion::PipelineIndex index, diffusion::read_pipeline_index(dir));
    output = index.family->output;
    class_name = index.class_name;
    if (output != diffusion::PipelineOutput::kVideo && flags.has("num-frames")) {
      return invalid_argument("--num-frames sizes a video pipeline; " + dir + " is a " +
                              index.family->name + " image one");
    }
  } else if (flags.has("num-frames")) {
    return invalid_argument("--num-frames sizes a video pipeline; " + dir +
                            " is a FLUX.1 transformer");
  }
  diffusion::MemoryQuery q;
  for (auto [name, field] : {std::pair{"width", &q.width}, std::pair{"height", &q.height},
                             std::pair{"num-frames", &q.num_frames}}) {
    if (flags.has(name)) {
      QS_ASSIGN_OR_RETURN(*field, flags.get_int(name));
    }
  }
  QS_ASSIGN_OR_RETURN(q.max_sequence_length, flags.get_int("max-sequence-length"));
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  q.threads = static_cast<int>(threads);
  QS_ASSIGN_OR_RETURN(diffusion::PipelineMemory m, diffusion::pipeline_memory(dir, q));
  if (flags.get_bool("json")) {
    std::printf("%s\n", diffusion::pipeline_memory_json(m).dump(2).c_str());
  } else if (output == diffusion::PipelineOutput::kVideo) {
    std::printf("%s: %s, a diffusion pipeline\n%s", dir.c_str(), class_name.c_str(),
                diffusion::pipeline_memory_text(m).c_str());
  } else {
    std::printf("%s: diffusion pipeline\n%s", dir.c_str(),
                diffusion::pipeline_memory_text(m).c_str());
  }
  return ok_status();
}

bool has_safetensors(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors") return true;
  }
  return false;
}

Status run(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, flags.positionals()[0]));
  if (is_diffusion_dir(dir)) return run_pipeline(dir, flags);
  std::optional<MultimodalMemory> parts;
  if (auto config = read_json(dir + "/config.json");
      config.ok() && is_multimodal_architecture(*config)) {
    QS_ASSIGN_OR_RETURN(parts, multimodal_memory(*config));
    // A config alone has nothing more to summarize: the parts' table is the answer.
    if (!has_safetensors(dir)) {
      if (flags.get_bool("json")) {
        std::printf(
            "%s\n",
            nlohmann::json{{"multimodal_memory", multimodal_memory_json(*parts)}}.dump(2).c_str());
      } else {
        std::printf("%s: %s, config.json only\n%s", dir.c_str(), parts->architecture.c_str(),
                    multimodal_memory_text(*parts).c_str());
      }
      return ok_status();
    }
  }
  QS_ASSIGN_OR_RETURN(io::CheckpointSummary summary, io::summarize_checkpoint(dir));
  // Mixture of Experts: what one token runs through, from the config (no load needed).
  if (auto config = models::load_model_config(dir); config.ok() && config->moe.n_experts > 0) {
    summary.active_parameters = models::active_parameter_count(*config);
    summary.active_note = std::to_string(config->moe.top_k) + " of " +
                          std::to_string(config->moe.n_experts) + " experts per token";
  }
  // A quantized checkpoint, or a 16-bit one whose lm_head --lm-head-dtype changes at load, is
  // loaded to show what runs each linear.
  if (!summary.quant_method.empty() || flags.get("lm-head-dtype") != "auto") {
    QS_RETURN_IF_ERROR(add_loaded_linears(dir, flags, &summary));
  } else if (flags.has("quantization")) {
    // Nothing to load for an unquantized checkpoint, but --quantization still has to agree.
    QS_RETURN_IF_ERROR(
        io::check_requested_quantization(io::QuantConfig(), flags.get("quantization")));
  }
  if (flags.get_bool("json")) {
    nlohmann::json out = io::summary_to_json(summary);
    if (parts) out["multimodal_memory"] = multimodal_memory_json(*parts);
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%s", io::summary_to_text(summary).c_str());
    if (parts) std::printf("\n%s", multimodal_memory_text(*parts).c_str());
  }
  return ok_status();
}

}  // namespace

int cmd_inspect(const Args& args) {
  Flags flags;
  flags.add("json", "print machine-readable JSON instead of text", /*is_bool=*/true)
      .add("width",
           "diffusion pipelines: image or video width the step is sized for (default: FLUX "
           "1024, Wan 832)")
      .add("height", "diffusion pipelines: image or video height (default: FLUX 1024, Wan 480)")
      .add("num-frames", "video pipelines (Wan): frames of the video, 4k + 1 (default 81)")
      .add("max-sequence-length", "diffusion pipelines: T5 tokens", false, "512")
      .add("threads", "diffusion pipelines: threads the attention scratch is sized for", false,
           "2");
  add_model_flags(flags);
  if (Status s = flags.parse(args); !s.ok()) {
    std::fprintf(stderr, "quantserve inspect: %s\n\n%s", s.message().c_str(),
                 flags.usage("inspect DIR").c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.usage("inspect DIR").c_str());
    return 0;
  }
  if (flags.positionals().size() != 1) {
    std::fprintf(stderr, "quantserve inspect: expected one checkpoint directory\n\n%s",
                 flags.usage("inspect DIR").c_str());
    return 2;
  }
  if (Status s = run(flags); !s.ok()) {
    std::fprintf(stderr, "quantserve inspect: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace qs::apps
