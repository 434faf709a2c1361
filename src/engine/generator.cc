// engine: the generation loop (see generator.h).
#include "engine/generator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <span>

#include "engine/kv_cache.h"

namespace qs::engine {
namespace {

// One request in flight. Its id in the KV cache is its index in the request list.
struct Active {
  Active(const tok::Tokenizer& tokenizer, const GenerationRequest& r,
         const std::vector<int32_t>& eos_ids)
      : tokens(r.prompt_ids),
        prompt_len(static_cast<int64_t>(r.prompt_ids.size())),
        sampler(r.params),
        output(tokenizer, r.params, r.prompt_ids, eos_ids) {}

  std::vector<int32_t> tokens;  // prompt, then every sampled token
  int64_t prompt_len;
  int64_t n_cached = 0;  // tokens whose K/V are in the cache
  Sampler sampler;
  OutputProcessor output;
  bool done = false;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Generator::Generator(const models::Model& model, const tok::Tokenizer& tokenizer,
                     std::vector<int32_t> eos_ids, ThreadPool& pool)
    : model_(model), tokenizer_(tokenizer), eos_ids_(std::move(eos_ids)), pool_(pool) {}

Result<std::vector<GenerationResult>> Generator::generate(
    const std::vector<GenerationRequest>& requests, const StreamCallback& on_step) {
  const models::ModelConfig& c = model_.config();
  const int64_t max_len = c.max_position_embeddings;
  stats_ = GenerationStats();

  KvCacheConfig kv_config;
  kv_config.n_layers = c.n_layers;
  kv_config.n_kv_heads = c.n_kv_heads;
  kv_config.head_dim = c.head_dim;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    const std::string where = "request " + std::to_string(i) + ": ";
    Status valid = r.params.validate(c.vocab_size);
    if (!valid.ok()) return valid.with_context("request " + std::to_string(i));
    if (r.prompt_ids.empty()) return invalid_argument(where + "the prompt has no tokens");
    for (int32_t id : r.prompt_ids) {
      if (id < 0 || id >= c.vocab_size) {
        return invalid_argument(where + "prompt token id " + std::to_string(id) +
                                " outside the vocabulary of " + std::to_string(c.vocab_size));
      }
    }
    const int64_t prompt_len = static_cast<int64_t>(r.prompt_ids.size());
    if (prompt_len >= max_len) {
      return out_of_range(where + "the prompt of " + std::to_string(prompt_len) +
                          " tokens leaves no room in the model's context of " +
                          std::to_string(max_len));
    }
    // Every request gets the blocks for its whole life up front, so none waits or is
    // preempted; a server's scheduler would allocate as it goes.
    const int64_t len = std::min<int64_t>(prompt_len + r.params.max_tokens, max_len);
    kv_config.n_blocks += (len + kv_config.block_size - 1) / kv_config.block_size;
    stats_.prompt_tokens += prompt_len;
  }
  // A huge max_tokens on a long-context model must be an error, not an out-of-memory kill.
  const double kv_bytes = 2.0 * sizeof(float) * static_cast<double>(kv_config.n_layers) *
                          kv_config.n_kv_heads * kv_config.head_dim * kv_config.block_size *
                          kv_config.n_blocks;
  const double ram_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (ram_bytes > 0 && kv_bytes > 0.5 * ram_bytes) {
    char msg[256];
    std::snprintf(msg, sizeof(msg),
                  "the KV cache for %lld tokens would need %.1f GiB, more than half of this "
                  "machine's %.1f GiB; lower max_tokens or the number of requests",
                  static_cast<long long>(kv_config.n_blocks * kv_config.block_size),
                  kv_bytes / (1 << 30), ram_bytes / (1 << 30));
    return out_of_range(msg);
  }
  KvCache cache(kv_config);

  std::vector<std::unique_ptr<Active>> active;
  active.reserve(requests.size());
  for (const auto& r : requests)
    active.push_back(std::make_unique<Active>(tokenizer_, r, eos_ids_));

  const auto start = std::chrono::steady_clock::now();
  bool all_started = false;
  std::vector<float> logits;
  std::vector<size_t> owner;  // batch row -> request index
  std::vector<bool> samples;  // batch row ends at the request's newest token
  while (true) {
    models::ForwardBatch batch;
    owner.clear();
    samples.clear();
    int64_t budget = kMaxBatchTokens;
    // Decode steps first (one token each, latency-bound), then prefill chunks in the room left.
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < active.size() && budget > 0; ++i) {
        Active& a = *active[i];
        const bool decoding = a.n_cached >= a.prompt_len;
        if (a.done || decoding != (pass == 0)) continue;
        const int64_t pending = static_cast<int64_t>(a.tokens.size()) - a.n_cached;
        const int64_t take = std::min(pending, budget);
        QS_RETURN_IF_ERROR(cache.reserve(static_cast<int64_t>(i), a.n_cached + take));
        ops::AttentionSeq seq;
        seq.query_start = static_cast<int64_t>(batch.token_ids.size());
        seq.n_query = take;
        seq.start_pos = a.n_cached;
        seq.block_table = cache.block_table(static_cast<int64_t>(i));
        batch.seqs.push_back(seq);
        batch.token_ids.insert(batch.token_ids.end(), a.tokens.begin() + a.n_cached,
                               a.tokens.begin() + a.n_cached + take);
        owner.push_back(i);
        samples.push_back(take == pending);
        budget -= take;
      }
    }
    if (batch.seqs.empty()) break;
    QS_RETURN_IF_ERROR(model_.forward(batch, cache.layers(), pool_, &logits));
    ++stats_.steps;

    for (size_t row = 0; row < owner.size(); ++row) {
      Active& a = *active[owner[row]];
      a.n_cached += batch.seqs[row].n_query;
      if (!samples[row]) continue;
      const std::span<const int32_t> all(a.tokens);
      const int32_t token =
          a.sampler.sample(logits.data() + row * c.vocab_size, c.vocab_size,
                           all.subspan(0, a.prompt_len), all.subspan(a.prompt_len));
      a.tokens.push_back(token);
      ++stats_.generated_tokens;
      StepOutput step = a.output.append(token);
      if (!step.finished && static_cast<int64_t>(a.tokens.size()) >= max_len) {
        // The context is full: the next token would have no position.
        StepOutput last = a.output.finish("length");
        step.text += last.text;
        step.finished = true;
        step.finish_reason = last.finish_reason;
      }
      if (step.finished) {
        a.done = true;
        cache.release(static_cast<int64_t>(owner[row]));
      }
      if (on_step) on_step(owner[row], step);
    }
    if (!all_started && std::all_of(active.begin(), active.end(), [](const auto& a) {
          return static_cast<int64_t>(a->tokens.size()) > a->prompt_len;
        })) {
      all_started = true;
      stats_.prefill_seconds = seconds_since(start);
    }
  }
  stats_.decode_seconds = seconds_since(start) - stats_.prefill_seconds;

  std::vector<GenerationResult> results;
  for (const auto& a : active) {
    GenerationResult r;
    r.output_ids = a->output.output_ids();
    r.text = a->output.text();
    r.finish_reason = a->output.finish_reason();
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace qs::engine
