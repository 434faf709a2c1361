// engine: the generation loop for a batch of requests. Every step packs, within a token
// budget, the next prefill chunk or the one decode token of each unfinished request into one
// batched forward over a paged KV cache (vLLM's continuous batching with chunked prefill),
// samples each request whose prompt is fully in the cache with its own Sampler, and feeds
// the token to its OutputProcessor, which decides what text is final and when it stops.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/output_processor.h"
#include "engine/sampler.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace qs::engine {

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;  // non-empty, BOS already in place if wanted
  SamplingParams params;
};

struct GenerationResult {
  std::vector<int32_t> output_ids;
  std::string text;
  std::string finish_reason;  // "stop" | "length"
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t steps = 0;
  double prefill_seconds = 0;  // until every request has its first token
  double decode_seconds = 0;   // the rest
};

// Called for every sampled token of request `index`, with the text that became final.
using StreamCallback = std::function<void(size_t index, const StepOutput& step)>;

class Generator {
 public:
  // Tokens fed to one forward call at most; longer prompts are prefilled in chunks.
  static constexpr int64_t kMaxBatchTokens = 2048;

  // `eos_ids`: tokens that end a request unless it sets ignore_eos (config.json,
  // generation_config.json and the tokenizer's EOS, merged by the caller). All references
  // must outlive the generator.
  Generator(const models::Model& model, const tok::Tokenizer& tokenizer,
            std::vector<int32_t> eos_ids, ThreadPool& pool);

  // Runs every request to completion. Invalid sampling parameters, empty prompts or prompts
  // that leave no room in the context are errors before any work is done.
  Result<std::vector<GenerationResult>> generate(const std::vector<GenerationRequest>& requests,
                                                 const StreamCallback& on_step = {});

  const GenerationStats& stats() const { return stats_; }

 private:
  const models::Model& model_;
  const tok::Tokenizer& tokenizer_;
  std::vector<int32_t> eos_ids_;
  ThreadPool& pool_;
  GenerationStats stats_;
};

}  // namespace qs::engine
