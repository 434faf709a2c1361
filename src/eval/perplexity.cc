// eval: windowed perplexity and KL divergence against a reference (see perplexity.h).
#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/kv_cache.h"

namespace qs::eval {

namespace {

// log(sum(exp(x))) in double, shifted by the max for range.
double log_sum_exp(const float* x, int64_t n) {
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - mx);
  return mx + std::log(s);
}

int64_t argmax(const float* x, int64_t n) {
  return std::max_element(x, x + n) - x;
}

// One model with its own cache, run window by window in chunks.
class Runner {
 public:
  Runner(const models::Model& model, int64_t seqlen, DType cache_dtype) : model_(model) {
    const models::ModelConfig& cfg = model.config();
    engine::KvCacheConfig kv;
    kv.n_layers = cfg.n_layers;
    kv.n_kv_heads = cfg.n_kv_heads;
    kv.head_dim = cfg.head_dim;
    kv.n_blocks = (seqlen + kv.block_size - 1) / kv.block_size;
    kv.dtype = cache_dtype;
    const models::KvCacheScales& scales = model.kv_cache_scales();
    const bool fp8 = cache_dtype == DType::kF8E4M3 || cache_dtype == DType::kF8E5M2;
    if (fp8 && static_cast<int64_t>(scales.k.size()) == cfg.n_layers) {
      kv.k_scales = scales.k;
      kv.v_scales = scales.v;
    }
    cache_ = std::make_unique<engine::KvCache>(kv, model.backend());
  }

  // Runs tokens [start, start + n) of the current window (the first `start` are cached).
  Status run(const int32_t* tokens, int64_t start, int64_t n, ThreadPool& pool) {
    constexpr int64_t kSeq = 0;
    if (start == 0) cache_->release(kSeq);
    QS_RETURN_IF_ERROR(cache_->reserve(kSeq, start + n));
    models::ForwardBatch batch;
    batch.token_ids.assign(tokens + start, tokens + start + n);
    batch.seqs = {ops::AttentionSeq{0, n, start, cache_->block_table(kSeq)}};
    batch.all_logits = true;
    return model_.forward(batch, cache_->layers(), pool, &logits_);
  }

  const float* row(int64_t i) const { return logits_.data() + i * model_.config().vocab_size; }

 private:
  const models::Model& model_;
  std::unique_ptr<engine::KvCache> cache_;
  std::vector<float> logits_;
};

Status check_context(const models::Model& m, int64_t seqlen, const char* which) {
  if (seqlen > m.config().max_position_embeddings) {
    return invalid_argument("seqlen " + std::to_string(seqlen) + " exceeds the " + which +
                            " model's max_position_embeddings " +
                            std::to_string(m.config().max_position_embeddings));
  }
  return ok_status();
}

}  // namespace

double token_nll(const float* logits, int64_t vocab, int32_t target) {
  return log_sum_exp(logits, vocab) - static_cast<double>(logits[target]);
}

double kl_divergence(const float* ref_logits, const float* logits, int64_t vocab) {
  const double lse_ref = log_sum_exp(ref_logits, vocab);
  const double lse = log_sum_exp(logits, vocab);
  double kl = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double lp_ref = static_cast<double>(ref_logits[i]) - lse_ref;
    const double lp = static_cast<double>(logits[i]) - lse;
    kl += std::exp(lp_ref) * (lp_ref - lp);
  }
  // Rounding can leave a tiny negative sum for near-identical distributions; KL is >= 0.
  return std::max(kl, 0.0);
}

Result<EvalReport> evaluate(const models::Model& model, const models::Model* reference,
                            const std::vector<int32_t>& tokens, const EvalOptions& options,
                            ThreadPool& pool) {
  const int64_t seqlen = options.seqlen;
  if (seqlen < 2)
    return invalid_argument("seqlen must be at least 2, got " + std::to_string(seqlen));
  if (options.chunk_tokens < 1) return invalid_argument("chunk_tokens must be positive");
  QS_RETURN_IF_ERROR(check_context(model, seqlen, "evaluated"));
  const int64_t vocab = model.config().vocab_size;
  if (reference != nullptr) {
    QS_RETURN_IF_ERROR(check_context(*reference, seqlen, "reference"));
    if (reference->config().vocab_size != vocab) {
      return invalid_argument("reference vocab_size " +
                              std::to_string(reference->config().vocab_size) +
                              " differs from the model's " + std::to_string(vocab));
    }
  }
  int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (options.max_tokens > 0) n_tokens = std::min(n_tokens, options.max_tokens);
  const int64_t n_windows = n_tokens / seqlen;
  if (n_windows == 0) {
    return invalid_argument("the text has " + std::to_string(n_tokens) +
                            " tokens, fewer than one window of seqlen " + std::to_string(seqlen));
  }
  for (int64_t i = 0; i < n_windows * seqlen; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return invalid_argument("token " + std::to_string(i) + " has id " +
                              std::to_string(tokens[i]) + ", outside the vocabulary of " +
                              std::to_string(vocab));
    }
  }

  for (DType t : {options.kv_cache_dtype, options.reference_kv_cache_dtype}) {
    if (!ops::kv_cache_dtype_supported(t)) {
      return invalid_argument(std::string("eval: no KV cache of dtype ") + dtype_name(t));
    }
  }
  Runner runner(model, seqlen, options.kv_cache_dtype);
  std::unique_ptr<Runner> ref_runner;
  if (reference != nullptr) {
    ref_runner = std::make_unique<Runner>(*reference, seqlen, options.reference_kv_cache_dtype);
  }

  EvalReport r;
  r.seqlen = seqlen;
  r.n_windows = n_windows;
  r.has_reference = reference != nullptr;
  double nll_sum = 0, ref_nll_sum = 0, kl_sum = 0;
  int64_t agree = 0;
  std::vector<double> kls;
  for (int64_t w = 0; w < n_windows; ++w) {
    const int32_t* window = tokens.data() + w * seqlen;
    for (int64_t start = 0; start < seqlen; start += options.chunk_tokens) {
      const int64_t n = std::min(options.chunk_tokens, seqlen - start);
      QS_RETURN_IF_ERROR(runner.run(window, start, n, pool));
      if (ref_runner) QS_RETURN_IF_ERROR(ref_runner->run(window, start, n, pool));
      // Row i predicts window[start + i + 1]; the window's last token predicts nothing here.
      for (int64_t i = 0; i < n && start + i + 1 < seqlen; ++i) {
        const int32_t target = window[start + i + 1];
        const float* logits = runner.row(i);
        nll_sum += token_nll(logits, vocab, target);
        ++r.n_scored;
        if (!ref_runner) continue;
        const float* ref = ref_runner->row(i);
        ref_nll_sum += token_nll(ref, vocab, target);
        const double kl = kl_divergence(ref, logits, vocab);
        kl_sum += kl;
        kls.push_back(kl);
        agree += argmax(ref, vocab) == argmax(logits, vocab);
        for (int64_t v = 0; v < vocab; ++v) {
          r.max_abs_logit_error =
              std::max(r.max_abs_logit_error, std::fabs(static_cast<double>(logits[v]) - ref[v]));
        }
      }
    }
  }
  r.nll_mean = nll_sum / r.n_scored;
  r.ppl = std::exp(r.nll_mean);
  if (ref_runner) {
    r.ref_nll_mean = ref_nll_sum / r.n_scored;
    r.ref_ppl = std::exp(r.ref_nll_mean);
    r.kl_mean = kl_sum / r.n_scored;
    std::sort(kls.begin(), kls.end());
    const size_t rank = static_cast<size_t>(std::ceil(0.99 * kls.size()));
    r.kl_p99 = kls[std::max<size_t>(rank, 1) - 1];
    r.kl_max = kls.back();
    r.top1_agreement = static_cast<double>(agree) / r.n_scored;
  }
  return r;
}

}  // namespace qs::eval
