// server: the seam between the HTTP layer and whatever generates tokens. The server submits
// one EngineRequest per choice and receives RequestOutputs on a callback from the engine
// thread; it never runs model code itself. The types mirror the engine API being built
// (engine/engine.h: EngineRequest, RequestOutput, EngineLoop::{submit, abort, stats,
// shutdown}), so plugging that engine in is one adapter implementing GenerationBackend.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"

namespace qs::server {

// Options the protocol accepts that SamplingParams does not carry yet (the engine adds
// them); a backend that cannot honour a requested one rejects the request in submit().
struct ExtraParams {
  std::optional<int> logprobs;  // top-k logprobs per generated token; 0 = only the sampled one
  int min_tokens = 0;           // EOS and stops ignored until this many tokens
};

struct EngineRequest {
  std::string id;
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  ExtraParams extra;
};

// Log-probability of one generated token, with the most likely alternatives when asked.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

// One update for a request: the tokens sampled since the last update and the text that
// became final with them. The last update has finished = true.
struct RequestOutput {
  std::string id;
  std::vector<int32_t> token_ids;  // new token ids (may be empty on a final or error update)
  std::string text;                // new final text
  bool finished = false;
  std::string finish_reason;  // "stop" | "length" | "abort" once finished
  // vLLM's stop_reason: the stop string or stop token id that ended the request, if any.
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  Status error;  // not ok: the request failed; finished is then true
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  std::vector<TokenLogprob> logprobs;  // one per token_ids entry when logprobs were asked
};

// Scheduler and cache state for /metrics, read at scrape time.
struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_cache_usage = 0.0;       // fraction of KV blocks in use, 0..1
  int64_t prefix_cache_queries = 0;  // cumulative, in tokens (vLLM counts tokens)
  int64_t prefix_cache_hits = 0;
  int64_t num_preemptions = 0;
};

// Called from the engine thread, in order, once per update of one request. It must not
// block for long: it hands the output to the HTTP thread waiting for it.
using OutputCallback = std::function<void(RequestOutput)>;

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Queues a request. An error here (parameters this engine cannot honour) means no
  // callback will ever come; otherwise callbacks come until one has finished = true.
  virtual Status submit(EngineRequest request, OutputCallback on_output) = 0;
  // Ends a request early (client gone, server shutting down): its last update says
  // finish_reason "abort" unless it had already finished. Unknown ids are ignored.
  virtual void abort(const std::string& id) = 0;
  virtual EngineStats stats() const = 0;
  // False once the engine thread has died; /health then answers 503.
  virtual bool healthy() const = 0;
  // Aborts everything still queued or running and joins the engine thread.
  virtual void shutdown() = 0;
};

}  // namespace qs::server
