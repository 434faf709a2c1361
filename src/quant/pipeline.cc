// quant: the streaming RTN run of `quantserve quantize` and its summary (see pipeline.h).
#include "quant/pipeline.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/json.h"
#include "io/checkpoint.h"
#include "quant/calibration.h"
#include "quant/rtn_pack.h"
#include "quant/staged_output.h"

namespace qs::quant {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The block of "<prefix>.<i>.<rest>" for the p-th prefix in `blocks`: {p, i}, or {-1, -1}.
// Pairs sort in block order (model.layers.2 before model.layers.10).
using BlockKey = std::pair<int, int64_t>;
BlockKey block_of(const std::string& name, const std::vector<std::string>& blocks) {
  for (size_t p = 0; p < blocks.size(); ++p) {
    const std::string prefix = blocks[p] + ".";
    if (name.rfind(prefix, 0) != 0) continue;
    size_t end = prefix.size();
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == prefix.size() || end - prefix.size() > 9) continue;
    return {static_cast<int>(p), std::stoll(name.substr(prefix.size(), end - prefix.size()))};
  }
  return {-1, -1};
}

// Files a checkpoint directory carries besides weights and config: the tokenizer, chat
// template, generation defaults and a multimodal model's processor configs are copied
// unchanged into the quantized checkpoint.
bool is_companion_file(const std::string& name) {
  return name.rfind("tokenizer", 0) == 0 || name.rfind("chat_template", 0) == 0 ||
         name == "special_tokens_map.json" || name == "generation_config.json" ||
         name == "vocab.json" || name == "merges.txt" || name == "added_tokens.json" ||
         name == "preprocessor_config.json" || name == "processor_config.json" ||
         name == "video_preprocessor_config.json";
}

}  // namespace

Status export_weights(const io::Checkpoint& ckpt, const std::string& base,
                      const std::vector<std::string>& blocks, const QuantizeOptions& o,
                      const QuantPlan& plan, TunedModel* tuned, const std::string& out_dir,
                      const ProgressFn& progress, const std::function<bool()>& cancelled,
                      QuantizeSummary* summary) {
  std::map<std::string, const LayerPlan*> by_module;
  std::map<BlockKey, int64_t> linears_left;  // block -> quantized linears not yet written
  for (const LayerPlan& l : plan.layers) {
    by_module[l.module] = &l;
    const BlockKey block = block_of(l.module, blocks);
    if (l.quantize && block.first >= 0) ++linears_left[block];
  }
  std::map<std::string, std::vector<std::string>> by_file;
  for (const std::string& name : ckpt.names()) by_file[ckpt.file_of(name)].push_back(name);
  const std::string single_file = base + ".safetensors";
  const std::string index_file = single_file + ".index.json";
  const bool sharded = fs::exists(ckpt.dir() + "/" + index_file);

  json weight_map = json::object();
  int64_t blocks_done = 0;
  for (auto& [file, names] : by_file) {
    // Block order within a shard, so progress advances block by block.
    std::stable_sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
      return block_of(a, blocks) < block_of(b, blocks);
    });
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : names) {
      if (cancelled && cancelled())
        return io_error("interrupted; " + o.output_dir + " left as it was");
      QS_ASSIGN_OR_RETURN(Tensor t, ckpt.get(name));
      summary->bytes_before += t.nbytes();
      const std::string module =
          name.size() > 7 && name.ends_with(".weight") ? name.substr(0, name.size() - 7) : "";
      auto it = by_module.find(module);
      if (it == by_module.end() || !it->second->quantize) {
        tensors.emplace_back(name, t);
        continue;
      }
      const LayerPlan& l = *it->second;
      auto tuned_it = tuned->weights.find(module);
      if (tuned_it != tuned->weights.end()) {
        QS_RETURN_IF_ERROR(pack_quantized(module, plan.parsed.scheme_for(module), o.format,
                                          std::move(tuned_it->second), &tensors));
        tuned->weights.erase(tuned_it);
      } else {
        QS_RETURN_IF_ERROR(rtn_quantize_and_pack(module, plan.parsed.scheme_for(module), o.format,
                                                 t.to_f32(), l.n, l.k, &tensors));
      }
      ++summary->n_quantized;
      const BlockKey block = block_of(module, blocks);
      if (block.first >= 0 && --linears_left[block] == 0) {
        ++blocks_done;
        if (progress) progress(blocks_done, static_cast<int64_t>(linears_left.size()));
      }
    }
    const std::string out_name = sharded ? file : single_file;
    for (const auto& [name, t] : tensors) {
      summary->bytes_after += t.nbytes();
      weight_map[name] = out_name;
    }
    QS_RETURN_IF_ERROR(
        io::write_safetensors(out_dir + "/" + out_name, tensors, {{"format", "pt"}}));
  }
  if (sharded) {
    QS_RETURN_IF_ERROR(write_json(
        out_dir + "/" + index_file,
        {{"metadata", {{"total_size", summary->bytes_after}}}, {"weight_map", weight_map}}));
  }
  return ok_status();
}

std::string scheme_name(const io::IntQuantSpec& s) {
  if (s.fp8) {
    return s.block > 0 ? "FP8_BLOCK (fp8 e4m3 128x128 blocks, dynamic 1x128 fp8 activations)"
                       : "FP8_DYNAMIC (fp8 e4m3 per-channel, dynamic per-token fp8 activations)";
  }
  if (s.act.quantized()) return "W8A8 (int8 per-channel, dynamic per-token int8 activations)";
  const char* preset = s.group_size == 128 && s.sym ? (s.bits == 4   ? "W4A16"
                                                       : s.bits == 8 ? "W8A16"
                                                       : s.bits == 3 ? "W3A16"
                                                                     : "W2A16")
                                                    : nullptr;
  std::string out = "int" + std::to_string(s.bits) + " " +
                    (s.group_size > 0 ? "g" + std::to_string(s.group_size) : "per-channel") +
                    (s.sym ? " sym" : " asym");
  return preset ? std::string(preset) + " (" + out + ")" : out;
}

Result<QuantizeSummary> quantize(const QuantizeOptions& o, const ProgressFn& progress,
                                 const std::function<bool()>& cancelled,
                                 const BlockReportFn& tune_progress) {
  const auto t0 = std::chrono::steady_clock::now();
  QS_RETURN_IF_ERROR(check_options(o));
  if (fs::exists(fs::path(o.model_dir) / "model_index.json")) {
    return quantize_pipeline(o, progress, cancelled);
  }
  const bool tuned_mode = o.iters > 0 || !o.disable_opt_rtn;
  const std::string src = o.model_dir;
  QS_ASSIGN_OR_RETURN(json config, read_json(src + "/config.json"));
  if (config.is_object() && config.value("model_type", json()) == "whisper") {
    return quantize_whisper(o, progress, cancelled);
  }
  if (config.contains("quantization_config") || fs::exists(src + "/quantization_config.json")) {
    return invalid_argument(src + " is already quantized (quantization_config present)");
  }
  QS_ASSIGN_OR_RETURN(models::ModelConfig mc, models::parse_model_config(config));
  QS_ASSIGN_OR_RETURN(io::Checkpoint ckpt, io::Checkpoint::open(src));
  // A decoder with towers (vision, audio): only its blocks are planned (pipeline_multimodal.cc).
  PlanTarget target = decoder_target(mc);
  if (!mc.tower_prefixes.empty()) {
    QS_ASSIGN_OR_RETURN(target, multimodal_target(o, mc, ckpt));
  }
  QS_ASSIGN_OR_RETURN(QuantPlan plan, plan_quantization(o, target));
  if (tuned_mode && mc.max_position_embeddings > 0 && o.seqlen > mc.max_position_embeddings) {
    return invalid_argument("--seqlen " + std::to_string(o.seqlen) +
                            " exceeds the model's max_position_embeddings " +
                            std::to_string(mc.max_position_embeddings));
  }
  for (const models::TensorSpec& t : models::expected_tensors(mc)) {
    QS_RETURN_IF_ERROR(ckpt.get(t.name, t.shape).status());
  }
  // The tuned modes run the whole model block by block before anything is written (then
  // lm_head, when quantized, on the last block's outputs); their results then replace RTN in
  // the streaming export below.
  TunedModel tuned;
  if (tuned_mode) {
    QS_ASSIGN_OR_RETURN(tuned, tune_model(o, plan, cancelled, tune_progress));
  }
  QS_ASSIGN_OR_RETURN(StagedOutput out, StagedOutput::begin(o.output_dir, o.overwrite));

  QuantizeSummary summary;
  QS_RETURN_IF_ERROR(export_weights(ckpt, "model", {"model.layers"}, o, plan, &tuned, out.dir(),
                                    progress, cancelled, &summary));
  // As auto-round: the same dict in config.json and in quantization_config.json (§3.5).
  config["quantization_config"] = plan.quantization_config;
  QS_RETURN_IF_ERROR(write_json(out.dir() + "/config.json", config));
  QS_RETURN_IF_ERROR(write_json(out.dir() + "/quantization_config.json", plan.quantization_config));
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(src, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || !is_companion_file(name)) continue;
    fs::copy_file(e.path(), fs::path(out.dir()) / name, ec);
    if (ec) return io_error("cannot copy " + e.path().string() + ": " + ec.message());
  }
  if (ec) return io_error("cannot list " + src + ": " + ec.message());
  if (cancelled && cancelled()) return io_error("interrupted; " + o.output_dir + " left as it was");
  QS_RETURN_IF_ERROR(out.commit());

  for (const LayerPlan& l : plan.layers) {
    if (!l.quantize) summary.kept.emplace_back(l.module, l.reason);
  }
  summary.scheme = scheme_name(o.spec) + " as " + io::export_format_name(o.format) + " (" +
                   plan.parsed.format() + "), " +
                   (o.iters > 0  ? "AutoRound (--iters " + std::to_string(o.iters) + ")"
                    : tuned_mode ? "OPT-RTN"
                                 : "RTN");
  if (!mc.tower_prefixes.empty()) {
    std::string towers;
    for (const std::string& p : mc.tower_prefixes) towers += (towers.empty() ? "" : ", ") + p + "*";
    summary.scheme += ", decoder blocks only (" + towers + " kept 16-bit)";
  }
  summary.calibration = tuned.calibration;
  summary.unrouted = std::move(tuned.unrouted);
  summary.blocks = std::move(tuned.blocks);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

std::string format_summary(const QuantizeSummary& s) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "| scheme | layers quantized | kept 16-bit | size before | size after | ratio | "
                "time |\n|---|---:|---:|---:|---:|---:|---:|\n| %s | %lld | %zu | %.1f MiB | "
                "%.1f MiB | %.3f | %.1f s |\n",
                s.scheme.c_str(), static_cast<long long>(s.n_quantized), s.kept.size(),
                s.bytes_before / 1048576.0, s.bytes_after / 1048576.0,
                s.bytes_before ? static_cast<double>(s.bytes_after) / s.bytes_before : 0.0,
                s.seconds);
  std::string out = buf;
  // Layers kept 16-bit, grouped by reason.
  std::map<std::string, std::vector<std::string>> by_reason;
  for (const auto& [module, reason] : s.kept) by_reason[reason].push_back(module);
  for (const auto& [reason, modules] : by_reason) {
    out += "kept 16-bit (" + reason + "): " + std::to_string(modules.size()) + " layer" +
           (modules.size() == 1 ? "" : "s") + ": " + modules[0];
    if (modules.size() > 1) out += ", ... " + modules.back();
    out += "\n";
  }
  if (!s.calibration.empty()) out += "calibration: " + s.calibration + "\n";
  if (!s.unrouted.empty()) {
    out +=
        std::to_string(s.unrouted.size()) +
        " expert linears saw no calibration token and were RTN-quantized (first: " + s.unrouted[0] +
        ")\n";
  }
  if (!s.blocks.empty()) {
    out +=
        "\n| block | initial loss (RTN) | best loss | best iter | time "
        "|\n|---:|---:|---:|---:|---:|\n";
    for (const BlockReport& b : s.blocks) {
      // OPT-RTN has no iterations: "-" in the best-iteration column.
      const std::string best_iter = b.iters > 0 ? std::to_string(b.best_iter) : "-";
      const std::string name = b.layer.empty() ? std::to_string(b.index) : b.layer;
      // OPT-RTN blocks run no forward for a loss (NaN): "-" there too.
      char initial[32] = "-", best[32] = "-";
      if (!std::isnan(b.initial_loss))
        std::snprintf(initial, sizeof(initial), "%.6g", b.initial_loss);
      if (!std::isnan(b.best_loss)) std::snprintf(best, sizeof(best), "%.6g", b.best_loss);
      std::snprintf(buf, sizeof(buf), "| %s | %s | %s | %s | %.1f s |\n", name.c_str(), initial,
                    best, best_iter.c_str(), b.seconds);
      out += buf;
    }
  }
  return out;
}

}  // namespace qs::quant
