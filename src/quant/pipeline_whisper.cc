// quant: `quantize` on a transformers Whisper directory (see pipeline.h). The encoder's and
// decoder's block linears are planned like an LLM's decoder blocks (pipeline_plan.cc) and written
// through the same streaming export (pipeline.cc) as auto-round's model-free RTN writes a
// WhisperForConditionalGeneration; everything else in the directory is carried over. OPT-RTN
// takes each linear's imatrix from transcribing audio (whisper_calibration.h) and searches its
// scales with opt_rtn(), as the LLM path does per block (pipeline_tuned.cc).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "audio/whisper_model.h"
#include "core/json.h"
#include "io/checkpoint.h"
#include "models/component.h"
#include "quant/opt_rtn.h"
#include "quant/pipeline.h"
#include "quant/staged_output.h"
#include "quant/whisper_calibration.h"

namespace qs::quant {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// block_name_to_quantize as auto-round 0.16's model-free mode writes it for Whisper: the
// prefixes of the quantized layers in the order of the sorted tensor names, so decoder first.
const std::vector<std::string> kWhisperBlocks = {"model.decoder.layers", "model.encoder.layers"};

// Every block linear the config implies, [out, in]: the encoder layers' self-attention and
// feed-forward, the decoder layers' also their cross-attention (encoder_attn).
std::vector<LinearSite> block_linears(const audio::WhisperConfig& c) {
  std::vector<LinearSite> out;
  const int64_t d = c.d_model;
  auto layer = [&](const std::string& p, int64_t ffn, bool cross) {
    for (const char* attn : {"self_attn", "encoder_attn"}) {
      if (!cross && std::string(attn) == "encoder_attn") continue;
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
        out.push_back({p + "." + attn + "." + proj, d, d});
      }
    }
    out.push_back({p + ".fc1", ffn, d});
    out.push_back({p + ".fc2", d, ffn});
  };
  for (int64_t i = 0; i < c.encoder_layers; ++i) {
    layer("model.encoder.layers." + std::to_string(i), c.encoder_ffn_dim, false);
  }
  for (int64_t i = 0; i < c.decoder_layers; ++i) {
    layer("model.decoder.layers." + std::to_string(i), c.decoder_ffn_dim, true);
  }
  return out;
}

// Files not carried over: the config (rewritten), the safetensors weights (re-exported) and
// the same 16-bit weights in other frameworks' files, which would shadow the quantized ones.
bool is_rewritten(const std::string& name) {
  return name == "config.json" || name == "quantization_config.json" ||
         name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json") ||
         name.ends_with(".bin") || name.ends_with(".bin.index.json") || name.ends_with(".h5") ||
         name.ends_with(".msgpack") || name.ends_with(".ckpt") || name.ends_with(".pt");
}

// OPT-RTN of every planned block linear (§1.5): the imatrix from transcribing the calibration
// audio with the full-precision model, then the weighted scale search. 8-bit linears stay plain
// RTN (left to the export), as the tool disables OPT-RTN for W8A16.
Result<TunedModel> opt_rtn_whisper(const QuantizeOptions& o, const QuantPlan& plan,
                                   const io::Checkpoint& ckpt) {
  QS_ASSIGN_OR_RETURN(std::vector<std::string> files,
                      whisper_calibration_files(o.dataset, o.nsamples));
  QS_ASSIGN_OR_RETURN(WhisperImatrix im, whisper_imatrix(o.model_dir, files, o.threads));
  TunedModel tuned;
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", im.seconds);
  tuned.calibration = std::to_string(im.n_clips) + " audio files (" + seconds + " s) from " +
                      o.dataset + ", transcribed greedily";
  ThreadPool pool(std::max(1, o.threads));
  for (const LayerPlan& l : plan.layers) {
    if (!l.quantize) continue;
    const formats::QuantScheme s = plan.parsed.scheme_for(l.module);
    if (s.bits >= 8) continue;
    auto it = im.sums.find(l.module);
    // Every block linear runs on every window, so a missing one is our bug, not the user's.
    if (it == im.sums.end() || static_cast<int64_t>(it->second.size()) != l.k) {
      return internal_error("whisper calibration: no inputs observed for " + l.module);
    }
    const std::vector<float> imatrix = imatrix_of(it->second, im.n_clips);
    QS_ASSIGN_OR_RETURN(Tensor t, ckpt.get(l.module + ".weight", {l.n, l.k}));
    const std::vector<float> w = t.to_f32();
    tuned.weights.emplace(
        l.module, opt_rtn(w.data(), l.n, l.k, s.bits, s.group_size, s.sym, imatrix.data(), &pool));
  }
  return tuned;
}

}  // namespace

Result<QuantizeSummary> quantize_whisper(const QuantizeOptions& o, const ProgressFn& progress,
                                         const std::function<bool()>& cancelled) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.iters > 0) {
    // AutoRound would need the encoder's and decoder's blocks as tunable blocks with their
    // backward passes, which only the LLM decoder block has.
    return invalid_argument(
        "Whisper is quantized by RTN or OPT-RTN only, not AutoRound; pass --iters 0 (OPT-RTN, "
        "with --dataset audio) or --iters 0 --disable_opt_rtn (RTN)");
  }
  if (o.format != io::ExportFormat::kAutoRound) {
    return invalid_argument(
        "a Whisper model is written as --format auto_round (block_name_to_quantize names its "
        "encoder and decoder blocks), not " +
        std::string(io::export_format_name(o.format)));
  }
  if (o.quant_lm_head) {
    return invalid_argument(
        "--quant_lm_head: Whisper's output projection (proj_out) is tied to "
        "model.decoder.embed_tokens, which stays 16-bit");
  }
  const std::string src = o.model_dir;
  QS_ASSIGN_OR_RETURN(models::Component meta, models::Component::open_config(src));
  if (meta.config().contains("quantization_config") ||
      fs::exists(src + "/quantization_config.json")) {
    return invalid_argument(src + " is already quantized (quantization_config present)");
  }
  QS_ASSIGN_OR_RETURN(audio::WhisperConfig wc, audio::read_whisper_config(meta));
  QS_ASSIGN_OR_RETURN(io::Checkpoint ckpt, io::Checkpoint::open(src));

  PlanTarget target;
  target.blocks = kWhisperBlocks;
  // auto-round's backends load a quantized layer only when its input splits into whole groups
  // (inference/backend.py, in_feature % group_size == 0): any other stays 16-bit, and says so.
  target.whole_groups = true;
  target.linears = block_linears(wc);
  for (const LinearSite& l : target.linears) {
    QS_RETURN_IF_ERROR(ckpt.get(l.module + ".weight", {l.n, l.k}).status());
  }
  // An untied output projection is listed so the summary says why it is not quantized.
  if (ckpt.has("proj_out.weight"))
    target.linears.push_back({"proj_out", wc.vocab_size, wc.d_model});
  QS_ASSIGN_OR_RETURN(QuantPlan plan, plan_quantization(o, target));
  TunedModel tuned;
  if (!o.disable_opt_rtn) {
    QS_ASSIGN_OR_RETURN(tuned, opt_rtn_whisper(o, plan, ckpt));
    if (cancelled && cancelled())
      return io_error("interrupted; " + o.output_dir + " left as it was");
  }
  QS_ASSIGN_OR_RETURN(StagedOutput out, StagedOutput::begin(o.output_dir, o.overwrite));

  QuantizeSummary summary;
  summary.calibration = tuned.calibration;
  QS_RETURN_IF_ERROR(export_weights(ckpt, "model", kWhisperBlocks, o, plan, &tuned, out.dir(),
                                    progress, cancelled, &summary));
  json config = meta.config();
  config["quantization_config"] = plan.quantization_config;
  QS_RETURN_IF_ERROR(write_json(out.dir() + "/config.json", config));
  QS_RETURN_IF_ERROR(write_json(out.dir() + "/quantization_config.json", plan.quantization_config));
  // The tokenizer, preprocessor_config.json (the feature extractor), generation_config.json
  // (its suppress_tokens and alignment heads) and normalizer.json are what a transcriber needs.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(src, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || is_rewritten(name)) continue;
    fs::copy_file(e.path(), fs::path(out.dir()) / name, ec);
    if (ec) return io_error("cannot copy " + e.path().string() + ": " + ec.message());
  }
  if (ec) return io_error("cannot list " + src + ": " + ec.message());
  if (cancelled && cancelled()) return io_error("interrupted; " + o.output_dir + " left as it was");
  QS_RETURN_IF_ERROR(out.commit());

  for (const LayerPlan& l : plan.layers) {
    if (!l.quantize) summary.kept.emplace_back(l.module, l.reason);
  }
  summary.scheme = scheme_name(o.spec) + " as auto_round (" + plan.parsed.format() + "), " +
                   (o.disable_opt_rtn ? "RTN" : "OPT-RTN") + ", Whisper encoder and decoder blocks";
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace qs::quant
