// tests: drives an engine::Engine to completion and gathers each request's whole output
// (tokens, text, finish reason, error, cache hits, logprobs), for the engine tests.
#pragma once

#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/memory_budget.h"

namespace qs::testing {

struct Completion {
  std::vector<int32_t> ids;
  std::string text;
  std::string finish_reason;
  Status error;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  std::vector<engine::SampleLogprobs> logprobs;
  int n_outputs = 0;  // RequestOutputs seen
  bool finished = false;
};

// Adds one output to its request's completion; the output must belong to an unfinished one.
inline void accumulate(std::map<std::string, Completion>* done, const engine::RequestOutput& o) {
  Completion& c = (*done)[o.id];
  EXPECT_FALSE(c.finished) << "output after the end of " << o.id;
  c.ids.insert(c.ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
  c.text += o.new_text;
  c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
  c.num_prompt_tokens = o.num_prompt_tokens;
  c.num_cached_tokens = o.num_cached_tokens;
  ++c.n_outputs;
  if (o.finished) {
    c.finished = true;
    c.finish_reason = o.finish_reason;
    c.error = o.error;
  }
}

// Steps until nothing is unfinished (at most max_steps, a guard against a livelock).
inline std::map<std::string, Completion> run_to_completion(engine::Engine& e,
                                                           int max_steps = 100000) {
  std::map<std::string, Completion> done;
  for (int s = 0; e.has_unfinished() && s < max_steps; ++s) {
    for (const auto& o : e.step()) accumulate(&done, o);
  }
  EXPECT_FALSE(e.has_unfinished()) << "the engine did not finish in " << max_steps << " steps";
  return done;
}

// An engine whose cache holds `cache_tokens` tokens.
inline std::unique_ptr<engine::Engine> make_engine(const models::Model& model,
                                                   const tok::Tokenizer* tokenizer,
                                                   std::vector<int32_t> eos, ThreadPool& pool,
                                                   int64_t cache_tokens,
                                                   engine::EngineConfig config = {}) {
  config.kv_cache_bytes = engine::kv_cache_bytes_per_token(model.config()) * cache_tokens;
  auto e = engine::Engine::create(model, tokenizer, std::move(eos), pool, config);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

// A name no other test process uses at the same time (ctest runs each test of a file as its
// own process, in parallel), for scratch directories.
inline std::string unique_name(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name =
      prefix + "_" + info->test_suite_name() + "_" + info->name() + "_" + std::to_string(getpid());
  for (char& ch : name) {
    if (ch == '/') ch = '_';
  }
  return name;
}

inline engine::EngineRequest greedy_request(const std::string& id, std::vector<int32_t> prompt,
                                            int32_t max_tokens) {
  engine::EngineRequest r;
  r.id = id;
  r.prompt_ids = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  return r;
}

}  // namespace qs::testing
