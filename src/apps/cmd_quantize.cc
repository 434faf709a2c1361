// apps: `quantserve quantize`, with auto-round's flag spelling (--model, --output_dir,
// --scheme W4A16, --bits, --group_size, --sym/--asym, --iters, --nsamples, --seqlen,
// --format auto_round|auto_gptq|auto_awq, --layer_config, --quant_lm_head, --disable_opt_rtn,
// ...). Parses, then hands over to quant::quantize (quant/pipeline.h); --verify evaluates the
// result against the source on held-out text (eval/eval_run.h). Ctrl-C / SIGTERM stop the run
// between tensors and leave the output location as it was.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <string>

#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/model_flags.h"
#include "core/json.h"
#include "core/mmap_file.h"
#include "core/thread_pool.h"
#include "eval/eval_run.h"
#include "io/checkpoint.h"
#include "quant/pipeline.h"

namespace qs::apps {
namespace {

std::atomic<bool> g_cancel{false};

extern "C" void on_signal(int) {
  g_cancel.store(true);
}

Result<quant::QuantizeOptions> options_from_flags(const Flags& f) {
  quant::QuantizeOptions o;
  if (!f.has("model")) return invalid_argument("--model DIR is required");
  if (!f.has("output_dir")) return invalid_argument("--output_dir DIR is required");
  QS_ASSIGN_OR_RETURN(o.model_dir, resolve_model_flag(f, f.get("model")));
  o.output_dir = f.get("output_dir");
  QS_ASSIGN_OR_RETURN(o.spec, quant::parse_scheme(f.get("scheme")));
  const bool w8a8 = o.spec.needs_compressed_tensors();
  if (w8a8 && (f.has("bits") || f.has("group_size") || f.get_bool("asym"))) {
    return invalid_argument("--scheme " + f.get("scheme") +
                            " is a fixed preset: --bits, --group_size and --asym do not apply");
  }
  if (f.has("bits")) {
    QS_ASSIGN_OR_RETURN(int64_t bits, f.get_int("bits"));
    o.spec.bits = static_cast<int>(bits);
  }
  if (f.has("group_size")) {
    QS_ASSIGN_OR_RETURN(o.spec.group_size, f.get_int("group_size"));
  }
  if (f.get_bool("sym") && f.get_bool("asym")) return invalid_argument("--sym and --asym conflict");
  if (f.get_bool("asym")) o.spec.sym = false;
  QS_ASSIGN_OR_RETURN(o.format, io::parse_export_format(f.get("format")));
  // The W8A8 / FP8 presets exist in compressed-tensors only, and are RTN there.
  if (w8a8 && !f.has("format")) o.format = io::ExportFormat::kCompressedTensors;
  QS_ASSIGN_OR_RETURN(o.iters, f.get_int("iters"));
  QS_ASSIGN_OR_RETURN(o.nsamples, f.get_int("nsamples"));
  QS_ASSIGN_OR_RETURN(o.seqlen, f.get_int("seqlen"));
  QS_ASSIGN_OR_RETURN(o.batch_size, f.get_int("batch_size"));
  QS_ASSIGN_OR_RETURN(int64_t seed, f.get_int("seed"));
  o.seed = static_cast<uint64_t>(seed);
  if (f.has("lr")) {
    QS_ASSIGN_OR_RETURN(o.lr, f.get_double("lr"));
  }
  if (f.has("minmax_lr")) {
    QS_ASSIGN_OR_RETURN(o.minmax_lr, f.get_double("minmax_lr"));
  }
  QS_ASSIGN_OR_RETURN(o.gradient_accumulate_steps, f.get_int("gradient_accumulate_steps"));
  QS_ASSIGN_OR_RETURN(int64_t threads, f.get_int("threads"));
  o.threads = static_cast<int>(threads);
  o.dataset = f.get("dataset");
  o.quant_lm_head = f.get_bool("quant_lm_head");
  o.disable_opt_rtn = f.get_bool("disable_opt_rtn");
  o.amp = !f.get_bool("disable_amp");
  if (w8a8 && !f.has("iters")) {
    o.iters = 0;
    o.disable_opt_rtn = true;
  }
  o.overwrite = f.get_bool("overwrite");
  if (f.has("layer_config")) {
    // Inline JSON, or a file holding it.
    const std::string v = f.get("layer_config");
    if (!v.empty() && v[0] == '{') {
      o.layer_config = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
      if (o.layer_config.is_discarded()) return invalid_argument("--layer_config: not valid JSON");
    } else {
      QS_ASSIGN_OR_RETURN(o.layer_config, read_json(v));
    }
  }
  return o;
}

Status check(const Flags& flags) {
  return options_from_flags(flags).status();
}

Status run(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(quant::QuantizeOptions o, options_from_flags(flags));
  if (flags.get_bool("verify")) {
    // Refused before quantizing: eval measures next-token perplexity on text.
    Result<nlohmann::json> config = read_json(o.model_dir + "/config.json");
    if (config.ok() && config->is_object() &&
        config->value("model_type", nlohmann::json()) == "whisper") {
      return invalid_argument(
          "--verify measures perplexity on text, which a Whisper model does not give; compare "
          "transcripts with scripts/check_whisper_transcribe.py (docs/audio.md)");
    }
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // Past a file-size limit a write must fail with EFBIG (an error we clean up after), not
  // kill the process before it can remove the staging directory.
  std::signal(SIGXFSZ, SIG_IGN);
  const bool tty = isatty(fileno(stderr));
  auto progress = [&](int64_t done, int64_t total) {
    if (!tty) return;
    std::fprintf(stderr, "\rquantize: block %lld/%lld", static_cast<long long>(done),
                 static_cast<long long>(total));
    if (done == total) std::fprintf(stderr, "\n");
  };
  // Tuned modes: one line per block, rewritten in place while it tunes on a terminal; the
  // finished line stays (and is the only one written when stderr is not a terminal).
  auto tune_progress = [&](const quant::BlockReport& b) {
    if (!tty && !b.done) return;
    // OPT-RTN (iters 0) has no iterations, and its blocks run no forward for a loss (NaN):
    // their line has none; its lm_head row has both.
    const std::string iter =
        b.iters > 0 ? "  iter " + std::to_string(b.iter) + "/" + std::to_string(b.iters) : "";
    const std::string best_iter = b.iters > 0 ? " (iter " + std::to_string(b.best_iter) + ")" : "";
    const std::string what =
        b.layer.empty() ? "block " + std::to_string(b.index + 1) + "/" + std::to_string(b.total)
                        : b.layer;
    char losses[96];
    if (std::isnan(b.best_loss)) {
      std::snprintf(losses, sizeof(losses), "scales searched");
    } else {
      std::snprintf(losses, sizeof(losses), "initial loss %.6g  best loss %.6g", b.initial_loss,
                    b.best_loss);
    }
    std::fprintf(stderr, "%squantize: %s%s  %s%s  elapsed %.0f s  ETA %.0f s%s",
                 tty ? "\r\033[K" : "", what.c_str(), iter.c_str(), losses, best_iter.c_str(),
                 b.elapsed, b.eta, b.done ? "\n" : "");
  };
  QS_ASSIGN_OR_RETURN(quant::QuantizeSummary summary,
                      quant::quantize(
                          o, progress, [] { return g_cancel.load(); }, tune_progress));
  std::printf("quantized %s into %s\n%s", o.model_dir.c_str(), o.output_dir.c_str(),
              quant::format_summary(summary).c_str());
  if (!flags.get_bool("verify")) return ok_status();
  eval::EvalRequest req;
  req.model_dir = o.output_dir;
  req.reference_dir = o.model_dir;
  req.dataset = eval::default_eval_dataset();
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  req.threads = static_cast<int>(threads);
  QS_ASSIGN_OR_RETURN(nlohmann::json result, eval::run_eval(req));
  std::printf("verify: %s against %s on %s\n", summary.scheme.c_str(), o.model_dir.c_str(),
              req.dataset.c_str());
  eval::print_eval_table(result, stdout);
  return ok_status();
}

}  // namespace

int cmd_quantize(const Args& args) {
  Flags flags;
  add_revision_flag(flags);
  flags.add("model", "source checkpoint directory (HF, unquantized)")
      .add("output_dir", "where the quantized checkpoint goes (must not exist unless --overwrite)")
      .add("scheme",
           "W4A16, W8A16, W3A16 or W2A16 (int, group 128, sym); llm-compressor's W8A8, "
           "FP8_DYNAMIC, FP8_BLOCK (RTN, compressed-tensors)",
           false, "W4A16")
      .add("bits", "override the scheme's bits: 2, 3, 4 or 8")
      .add("group_size", "override the scheme's group size (-1 = per output channel)")
      .add("sym", "symmetric (the default)", true)
      .add("asym", "asymmetric: zero points stored", true)
      .add("iters", "AutoRound tuning steps per block (0 = RTN / OPT-RTN)", false, "200")
      .add("lr", "AutoRound learning rate for the rounding (default 1/iters)")
      .add("minmax_lr", "AutoRound learning rate for the clipping (default lr)")
      .add("nsamples", "calibration samples", false, "128")
      .add("seqlen", "tokens per calibration sample", false, "2048")
      .add("batch_size", "calibration samples per tuning step", false, "8")
      .add("gradient_accumulate_steps", "batches per optimizer step", false, "1")
      .add("seed", "seed for calibration sampling and tuning", false, "42")
      .add("dataset",
           "calibration text: .txt (one document per line), .jsonl with \"text\", or .jsonl with "
           "\"input_ids\" (pre-tokenized samples, used in file order); for Whisper, audio: a "
           "directory of sound files or a text file listing their paths")
      .add("format", "auto_round, auto_gptq, auto_awq or llm_compressor (compressed-tensors)",
           false, "auto_round")
      .add("layer_config",
           "per-layer schemes: JSON (or a file), e.g. {\"down_proj\": {\"bits\": 8}}")
      .add("quant_lm_head", "also quantize lm_head (refused when tied to the embeddings)", true)
      .add("disable_opt_rtn", "with --iters 0: pure RTN, streamed without building the model", true)
      .add("disable_amp",
           "calibration forwards and tuning with f32 products (default: bf16 products with f32 "
           "sums, as the tool's bf16 autocast)",
           true)
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()))
      .add("overwrite", "replace an existing --output_dir", true)
      .add("verify", "evaluate the result against --model on held-out text (quantserve eval)",
           true);
  return run_command("quantize", flags, args, check, run);
}

}  // namespace qs::apps
