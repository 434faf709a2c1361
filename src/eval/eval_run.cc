// eval: the CLI's evaluation run (see eval_run.h).
#include "eval/eval_run.h"

#include <algorithm>
#include <chrono>

#include "core/data_dir.h"
#include "engine/kv_cache.h"
#include "eval/perplexity.h"
#include "io/text_dataset.h"
#include "ops/linear.h"
#include "tokenizer/tokenizer.h"

namespace qs::eval {

std::string default_eval_dataset() {
  return data_dir(QS_DATA_DIR) + "/eval/wiki.test.raw.406";
}

Result<nlohmann::json> run_eval(const EvalRequest& request) {
  const auto t0 = std::chrono::steady_clock::now();
  QS_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model,
                      models::Model::load(request.model_dir, request.load));
  std::unique_ptr<models::Model> reference;
  if (!request.reference_dir.empty()) {
    QS_ASSIGN_OR_RETURN(reference, models::Model::load(request.reference_dir));
  }
  QS_ASSIGN_OR_RETURN(auto tokenizer, tok::load_tokenizer(request.model_dir));
  QS_ASSIGN_OR_RETURN(std::vector<std::string> docs, io::read_text_documents(request.dataset));
  // WikiText rows are joined with "\n\n" as GPTQ's and auto-round's evaluation does; a .txt
  // file is one document and goes through unchanged.
  const std::vector<int32_t> tokens =
      tokenizer->encode(io::join_documents(docs, "\n\n"), /*add_special_tokens=*/true);

  EvalOptions options;
  options.max_tokens = request.max_tokens;
  options.seqlen = request.seqlen;
  options.kv_cache_dtype = request.kv_cache_dtype;
  options.reference_kv_cache_dtype = request.reference_kv_cache_dtype;
  if (options.seqlen == 0) {
    options.seqlen = std::min<int64_t>(2048, model->config().max_position_embeddings);
    if (reference) {
      options.seqlen = std::min(options.seqlen, reference->config().max_position_embeddings);
    }
  }
  ThreadPool pool(std::max(1, request.threads));
  QS_ASSIGN_OR_RETURN(EvalReport r, evaluate(*model, reference.get(), tokens, options, pool));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  nlohmann::json j = {
      {"model", request.model_dir},
      {"dataset", request.dataset},
      {"dataset_tokens", tokens.size()},
      {"bos", "tokenizer's own (once, at the start of the text)"},
      {"seqlen", r.seqlen},
      {"kv_cache_dtype", engine::kv_cache_dtype_name(request.kv_cache_dtype)},
      {"windows", r.n_windows},
      {"scored_tokens", r.n_scored},
      {"nll_mean", r.nll_mean},
      {"ppl", r.ppl},
      {"activation_precision", ops::activation_precision_name(ops::activation_precision())},
      {"seconds", seconds}};
  const io::QuantConfig& q = model->quant_config();
  j["weights"] = q.quantized() ? q.summary() : "unquantized";
  if (r.has_reference) {
    j["reference"] = request.reference_dir;
    j["reference_kv_cache_dtype"] = engine::kv_cache_dtype_name(request.reference_kv_cache_dtype);
    j["reference_nll_mean"] = r.ref_nll_mean;
    j["reference_ppl"] = r.ref_ppl;
    j["kl_mean"] = r.kl_mean;
    j["kl_p99"] = r.kl_p99;
    j["kl_max"] = r.kl_max;
    j["top1_agreement"] = r.top1_agreement;
    j["max_abs_logit_error"] = r.max_abs_logit_error;
  }
  return j;
}

void print_eval_table(const nlohmann::json& j, FILE* out) {
  const bool ref = j.contains("reference");
  std::fprintf(out, "| model | weights | seqlen | windows | tokens | ppl |%s\n",
               ref ? " ref ppl | KL mean | KL p99 | top-1 agree | max abs logit err |" : "");
  std::fprintf(out, "|---|---|---:|---:|---:|---:|%s\n", ref ? "---:|---:|---:|---:|---:|" : "");
  std::fprintf(out, "| %s | %s | %lld | %lld | %lld | %.4f |",
               j["model"].get<std::string>().c_str(), j["weights"].get<std::string>().c_str(),
               j["seqlen"].get<long long>(), j["windows"].get<long long>(),
               j["scored_tokens"].get<long long>(), j["ppl"].get<double>());
  if (ref) {
    std::fprintf(out, " %.4f | %.6f | %.6f | %.2f%% | %.4f |", j["reference_ppl"].get<double>(),
                 j["kl_mean"].get<double>(), j["kl_p99"].get<double>(),
                 100.0 * j["top1_agreement"].get<double>(), j["max_abs_logit_error"].get<double>());
  }
  std::fprintf(out, "\n");
  std::fflush(out);
}

}  // namespace qs::eval
