// apps: `quantserve eval --model DIR [--reference DIR] [--dataset FILE] [--seqlen N]
// [--max-tokens N] [--threads N] [--activation-precision int8|bf16] [--json FILE|-]`: perplexity of
// a checkpoint over held-out text and, with --reference (typically the unquantized source), KL
// divergence, top-1 agreement and logit error against it on the same tokens (eval/perplexity.h says
// how the text is windowed and where BOS goes).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/model_flags.h"
#include "core/json.h"
#include "engine/kv_cache.h"
#include "eval/eval_run.h"
#include "io/checkpoint.h"
#include "ops/linear.h"

namespace qs::apps {
namespace {

Status check(const Flags& flags) {
  if (!flags.has("model")) return invalid_argument("--model DIR is required");
  QS_RETURN_IF_ERROR(flags.get_int("threads").status());
  QS_RETURN_IF_ERROR(flags.get_int("max-tokens").status());
  if (flags.has("seqlen")) QS_RETURN_IF_ERROR(flags.get_int("seqlen").status());
  QS_RETURN_IF_ERROR(kv_cache_dtype_from_flags(flags).status());
  QS_RETURN_IF_ERROR(engine::parse_kv_cache_dtype(flags.get("reference-kv-cache-dtype")).status());
  if (flags.has("activation-precision") &&
      !ops::parse_activation_precision(flags.get("activation-precision"))) {
    return invalid_argument("--activation-precision must be int8 or bf16, got " +
                            flags.get("activation-precision"));
  }
  return ok_status();
}

Status run(const Flags& flags) {
  eval::EvalRequest req;
  QS_ASSIGN_OR_RETURN(req.model_dir, resolve_model_flag(flags, flags.get("model")));
  if (flags.has("reference")) {
    QS_ASSIGN_OR_RETURN(req.reference_dir, resolve_model_flag(flags, flags.get("reference")));
  }
  req.dataset = flags.has("dataset") ? flags.get("dataset") : eval::default_eval_dataset();
  QS_ASSIGN_OR_RETURN(req.seqlen,
                      flags.has("seqlen") ? flags.get_int("seqlen") : Result<int64_t>(0));
  QS_ASSIGN_OR_RETURN(req.max_tokens, flags.get_int("max-tokens"));
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  req.threads = static_cast<int>(threads);
  QS_ASSIGN_OR_RETURN(req.load, load_options_from_flags(flags));
  QS_ASSIGN_OR_RETURN(req.kv_cache_dtype, kv_cache_dtype_from_flags(flags));
  QS_ASSIGN_OR_RETURN(req.reference_kv_cache_dtype,
                      engine::parse_kv_cache_dtype(flags.get("reference-kv-cache-dtype")));
  // Both models of the run use it (the reference is usually unquantized: no effect there).
  if (flags.has("activation-precision")) {
    ops::set_activation_precision(
        *ops::parse_activation_precision(flags.get("activation-precision")));
  }
  QS_ASSIGN_OR_RETURN(nlohmann::json result, eval::run_eval(req));
  eval::print_eval_table(result, flags.get("json") == "-" ? stderr : stdout);
  if (flags.get("json") == "-") {
    std::printf("%s\n", result.dump(2).c_str());
  } else if (flags.has("json")) {
    QS_RETURN_IF_ERROR(write_json(flags.get("json"), result));
    std::fprintf(stderr, "eval: wrote %s\n", flags.get("json").c_str());
  }
  return ok_status();
}

}  // namespace

int cmd_eval(const Args& args) {
  Flags flags;
  flags.add("model", "checkpoint directory to evaluate")
      .add("reference", "reference checkpoint (e.g. the unquantized source) for KL and agreement")
      .add("dataset", "text (.txt) or JSONL with a \"text\" field; default: the shipped " +
                          std::string("WikiText-2 test excerpt (data/eval/wiki.test.raw.406)"))
      .add("seqlen", "tokens per window (default: min(2048, the models' context))")
      .add("max-tokens", "use at most this many tokens of the text (0 = all)", false, "0")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()))
      .add("activation-precision",
           "activations of the quantized linears: int8 (int kernels) or bf16 (exact products; "
           "default from QS_ACTIVATION_PRECISION, else " +
               std::string(ops::activation_precision_name(ops::kDefaultActivationPrecision)) + ")")
      .add("json", "also write the results as JSON to this file (- = stdout, table to stderr)");
  add_model_flags(flags);
  add_kv_cache_dtype_flag(flags);
  flags.add("reference-kv-cache-dtype", "KV cache dtype of the reference (as --kv-cache-dtype)",
            false, "auto");
  return run_command("eval", flags, args, check, run);
}

}  // namespace qs::apps
