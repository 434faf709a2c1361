// engine: the long-lived inference engine, one per loaded model (vLLM V1's EngineCore).
// Requests come and go while it runs: add_request() queues one, abort() drops one, and every
// step() runs one scheduler step (scheduler.h: token budget, chunked prefill, preemption by
// recompute, prefix caching) and one batched forward over a paged KV cache allocated once,
// then samples each request whose prompt is in the cache and returns what every request that
// moved produced. A request's error ends that request only. Not thread-safe: one thread
// drives it (EngineLoop, engine_loop.h, is the thread-safe front for a server).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/output_processor.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/tensor_parallel_worker.h"
#include "models/model.h"
#include "models/multimodal.h"
#include "tokenizer/tokenizer.h"

namespace qs::engine {

// Sizes and limits, with vLLM's names and defaults (the CPU ones of get_batch_defaults).
struct EngineConfig {
  // Bytes of K/V storage over all layers, allocated once at create(); it must hold at least
  // one max_model_len sequence. memory_budget.h has helpers to choose it.
  int64_t kv_cache_bytes = 0;
  int64_t block_size = 16;  // tokens per KV block (--block-size)
  // --kv-cache-dtype (kv_cache.h): F32 (auto), BF16, F8_E4M3 or F8_E5M2. The fp8 ones take
  // the model's per-layer k/v scales (1.0 where the checkpoint has none).
  DType kv_cache_dtype = DType::kF32;
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;  // tokens per forward (the step's token budget)
  // Prompt + output tokens of one request; 0: the model's max_position_embeddings. Larger is
  // allowed (with a warning): positions past the model's then fail their request.
  int64_t max_model_len = 0;
  bool enable_prefix_caching = true;
  // The model's vision tower (vision-language models), which encodes the images and videos of
  // a request when it is first scheduled; null: requests with items are refused. Not owned.
  const models::VisionEncoder* vision = nullptr;
  // The model's audio tower (Qwen2.5-Omni's thinker), likewise for sound clips.
  const models::AudioEncoder* audio = nullptr;
};

// One request. `id` must be unique among unfinished requests (the server's request id).
struct EngineRequest {
  std::string id;
  std::vector<int32_t> prompt_ids;  // non-empty, BOS already in place if wanted
  SamplingParams params;
  // Images, videos and sound clips, each on its span of placeholders in prompt_ids, in prompt
  // order (models/multimodal.h; a video with its sound track interleaves the two in its span).
  std::vector<models::MultimodalItem> mm_items;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// Logprobs of one generated token (SamplingParams::logprobs): the sampled token's and the N
// most likely tokens' (best first, ties to the lower id), from log_softmax of the raw logits.
struct SampleLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top;
};

// What one request produced in one step(). Concatenating a request's new_token_ids and
// new_text over its outputs gives its whole completion.
struct RequestOutput {
  std::string id;
  std::vector<int32_t> new_token_ids;
  std::string new_text;  // text that became final (stop strings held back until decided)
  std::vector<SampleLogprobs> logprobs;  // one per new token when params.logprobs is set
  bool finished = false;
  // Once finished: "stop" (EOS, stop token, stop string), "length" (max_tokens or the
  // context), "abort" (abort(), or an error: then `error` says why).
  std::string finish_reason;
  // vLLM's stop_reason: the stop_token_ids entry or stop string that ended it.
  std::optional<int32_t> stop_token_id;
  std::optional<std::string> stop_string;
  Status error;  // non-ok: this request failed (finished, "abort"); others are unaffected
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache
};

// A snapshot for metrics (vLLM's Prometheus names in comments). Counters only grow.
struct EngineStats {
  int64_t num_running = 0;     // num_requests_running
  int64_t num_waiting = 0;     // num_requests_waiting
  int64_t kv_blocks_used = 0;  // blocks some request holds
  int64_t kv_blocks_total = 0;
  int64_t kv_cache_tokens = 0;       // capacity: total blocks x block_size
  int64_t prefix_cache_queries = 0;  // prefix_cache_queries_total (tokens)
  int64_t prefix_cache_hits = 0;     // prefix_cache_hits_total (tokens)
  int64_t prompt_tokens = 0;         // prompt_tokens_total (counted once per request)
  int64_t generation_tokens = 0;     // generation_tokens_total
  int64_t preemptions = 0;           // num_preemptions_total
  int64_t finished_stop = 0;         // request_success_total{finished_reason=...}
  int64_t finished_length = 0;
  int64_t finished_abort = 0;   // aborts and errors
  int64_t steps = 0;            // forward calls
  int64_t computed_tokens = 0;  // tokens fed to forward (prefix-cache hits are not)
  // MoE models: (token, expert) pairs routed, and expert weight reads (one per chosen expert
  // per layer per step): their ratio is how many tokens share each read of an expert.
  int64_t moe_routed_slots = 0;
  int64_t moe_expert_reads = 0;
  // Multimodal items (images, videos, clips) run through their towers, and those whose rows the
  // prefix cache already held, so that their towers never ran.
  int64_t mm_items_encoded = 0;
  int64_t mm_items_cached = 0;
  // kv_cache_usage_perc, in [0, 1].
  double kv_cache_usage() const {
    return kv_blocks_total > 0 ? static_cast<double>(kv_blocks_used) / kv_blocks_total : 0.0;
  }
};

class Engine {
 public:
  // `tokenizer` may be null: then outputs carry token ids only (vLLM's skip_tokenizer_init)
  // and stop strings are refused. `eos_ids` end a request unless it sets ignore_eos (config,
  // generation_config and tokenizer EOS, merged by the caller). The model, tokenizer and pool
  // must outlive the engine. Allocates the KV cache and logs its capacity; an error when the
  // budget cannot hold one max_model_len request.
  static Result<std::unique_ptr<Engine>> create(const models::Model& model,
                                                const tok::Tokenizer* tokenizer,
                                                std::vector<int32_t> eos_ids, ThreadPool& pool,
                                                const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The checks add_request() makes that do not depend on the engine's state (parameters,
  // token ids, fits the context and the cache). Thread-safe: reads only the configuration.
  Status validate(const EngineRequest& request) const;
  // Queues a request; an error (nothing queued) if validate() fails or the id is in use.
  Status add_request(EngineRequest request);
  // Drops an unfinished request and frees its KV blocks now; the next step() returns its
  // final output (finish_reason "abort"). Unknown ids are ignored.
  void abort(const std::string& id);
  // abort() for every unfinished request.
  void abort_all();
  // One scheduler step and one batched forward. Returns an output for every request that
  // produced tokens, finished or failed in this step (and for requests aborted since the
  // last step). Prefill chunks that do not reach the end of a prompt produce nothing yet.
  std::vector<RequestOutput> step();
  // Whether step() has anything to do.
  bool has_unfinished() const { return !requests_.empty() || !pending_.empty(); }
  // Non-ok once the model can no longer run: a tensor-parallel rank died or stopped answering
  // (kUnavailable). Every unfinished request has then failed with this error, and new ones are
  // refused with it; the process should report unhealthy and exit.
  const Status& health() const { return broken_; }
  // Under tensor parallelism, checks that every rank still answers (engine/
  // tensor_parallel_worker.h's ping) and returns health(); a no-op otherwise. EngineLoop calls
  // it while idle, so that a dead rank shows on /health before the next request.
  Status heartbeat();
  bool distributed() const { return model_.tensor_parallel() != nullptr; }

  EngineStats stats() const;
  const EngineConfig& config() const { return config_; }
  const models::Model& model() const { return model_; }

 private:
  struct Request;

  Engine(const models::Model& model, const tok::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
         ThreadPool& pool, const EngineConfig& config, const KvCacheConfig& kv_config);
  // Samples the next token of a request whose tokens are all computed and records it.
  // `drawn`: the token draw() already picked from these logits (requests without logprobs,
  // whose draws run on the pool), or -1 to draw here.
  void sample(Request& r, float* logits, RequestOutput* out, int32_t drawn = -1);
  // The request's next token from its logits (min_tokens, penalties, the sampler); touches
  // only the request and its logits row, so draws of different requests run in parallel.
  int32_t draw(Request& r, float* logits) const;
  // The request's items against its prompt and the model (the towers, the placeholders of
  // each span as models::check_placeholders wants them, the pixel and feature counts).
  Status validate_items(const EngineRequest& r) const;
  // Runs the towers over a request's items the first time it is scheduled.
  // Runs the towers of the items whose spans overlap prompt positions [lo, hi) and are not
  // encoded yet.
  Status encode_items(Request& r, int64_t lo, int64_t hi);
  // Model::forward, after telling the other tensor-parallel ranks (when there are any) to run
  // the same batch; a broken group sets broken_.
  Status forward(const models::ForwardBatch& batch, std::vector<float>* logits);
  // The forward batch of `chunks`, in order, M-RoPE positions axis-major.
  models::ForwardBatch make_batch(std::span<const ScheduledChunk> chunks) const;
  // Appends one chunk's rows: its tokens, the embeddings of the placeholders it covers and,
  // for an M-RoPE model, its 3-D positions ([row][axis] into `rows3`).
  void add_chunk(const ScheduledChunk& ch, const Request& r, models::ForwardBatch* batch,
                 std::vector<int32_t>* positions3) const;
  // Ends a request: output fields, stats, blocks freed; the caller erases it.
  void finish(Request& r, const std::string& reason, RequestOutput* out);
  RequestOutput new_output(const Request& r) const;

  const models::Model& model_;
  const tok::Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
  ThreadPool& pool_;
  EngineConfig config_;
  KvCache cache_;  // storage only; the scheduler's block pool assigns the blocks
  Scheduler scheduler_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::vector<RequestOutput> pending_;  // aborts not yet returned by step()
  EngineStats stats_;
  std::vector<float> logits_;         // [n_chunks, vocab] of the last forward
  std::vector<float> scratch_;        // [vocab] raw logits kept for logprobs
  std::vector<int32_t> scratch_ids_;  // [vocab] token ids ranked for top logprobs
  Status broken_;                     // see health()
};

}  // namespace qs::engine
