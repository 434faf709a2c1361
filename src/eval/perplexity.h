// eval: perplexity of a model over a token stream, and its divergence from a reference model
// on the very same tokens (the numbers a quantized checkpoint is judged by: llama.cpp's
// `perplexity --kl-divergence`, and the WikiText perplexity of the GPTQ/AWQ/AutoRound papers).
//
// Windows: the stream is cut into floor(n / seqlen) non-overlapping windows of seqlen tokens,
// each run from an empty cache; within a window every token but the first is predicted from
// the ones before it (the tail shorter than a window is dropped). This is GPTQ's `ppl` eval,
// which auto-round and HF's perplexity guide (stride == max_length) follow. BOS: the text is
// tokenized once with the tokenizer's own special tokens, as HF's `tokenizer(text)` does, so
// only the first window starts with BOS (llama.cpp instead writes BOS over the first token of
// every window and scores only each window's second half; its numbers are not comparable).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/model.h"

namespace qs::eval {

struct EvalOptions {
  int64_t seqlen = 2048;
  // At most this many tokens of the stream are used (0: all of it).
  int64_t max_tokens = 0;
  // Tokens per forward call within a window: bounds the logits buffer (chunk x vocab floats
  // per model) without changing the result beyond float summation order inside attention.
  int64_t chunk_tokens = 512;
  // KV-cache dtypes (engine::parse_kv_cache_dtype) of the model and of the reference: with the
  // same checkpoint as both, KL measures what a smaller cache costs. fp8 takes each model's
  // checkpoint scales (1.0 where it has none).
  DType kv_cache_dtype = DType::kF32;
  DType reference_kv_cache_dtype = DType::kF32;
};

struct EvalReport {
  int64_t seqlen = 0;
  int64_t n_windows = 0;
  int64_t n_scored = 0;  // predicted tokens: n_windows * (seqlen - 1)
  double nll_mean = 0;   // nats per predicted token
  double ppl = 0;        // exp(nll_mean)

  // Filled when a reference model was given; all per predicted token.
  bool has_reference = false;
  double ref_nll_mean = 0;
  double ref_ppl = 0;
  double kl_mean = 0;  // KL(reference || model), nats
  double kl_p99 = 0;   // 99th percentile (nearest rank) of the per-token KL
  double kl_max = 0;
  double top1_agreement = 0;       // fraction of positions where both argmaxes agree
  double max_abs_logit_error = 0;  // max over positions and vocab of |model - reference|
};

// -log softmax(logits)[target], in double.
double token_nll(const float* logits, int64_t vocab, int32_t target);

// KL(p_ref || p) = sum_i p_ref_i (log p_ref_i - log p_i) of the two softmaxes, in double.
// Identical logits give exactly 0.
double kl_divergence(const float* ref_logits, const float* logits, int64_t vocab);

// Evaluates `model` (and `reference`, when not null) over `tokens`. Errors: fewer tokens than
// one window, seqlen < 2 or past either model's max_position_embeddings, token ids outside
// the vocabulary, reference and model vocabularies that differ.
Result<EvalReport> evaluate(const models::Model& model, const models::Model* reference,
                            const std::vector<int32_t>& tokens, const EvalOptions& options,
                            ThreadPool& pool);

}  // namespace qs::eval
