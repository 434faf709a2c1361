// apps: `quantserve bench throughput`, vLLM's offline throughput benchmark
// (vllm/benchmarks/throughput.py): every request of the dataset submitted at once to the
// in-process engine (temperature 1, top_p 1, ignore_eos, max_tokens = the request's output
// length), the whole call timed, and requests/s, total tokens/s and output tokens/s printed as
// vLLM prints them.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "apps/bench_commands.h"
#include "apps/model_flags.h"
#include "apps/sampling_flags.h"
#include "core/json.h"
#include "engine/engine.h"
#include "engine/eos_ids.h"
#include "engine/memory_budget.h"
#include "io/checkpoint.h"
#include "io/generation_config.h"
#include "models/model.h"

namespace qs::apps {
namespace {

struct ThroughputRun {
  double elapsed_s = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
};

// All requests submitted at once to one Engine whose KV cache holds every one of them
// (vLLM's LLM.generate sizes the batch by its cache the same way), stepped to completion.
Result<ThroughputRun> generate_all(const models::Model& model, const tok::Tokenizer& tokenizer,
                                   const std::vector<int32_t>& eos_ids, int threads,
                                   const std::vector<engine::EngineRequest>& requests) {
  ThreadPool pool(threads);
  engine::EngineConfig config;
  int64_t total_tokens = 0;
  for (const engine::EngineRequest& r : requests) {
    const int64_t len = static_cast<int64_t>(r.prompt_ids.size()) + r.params.max_tokens;
    config.max_model_len = std::max(config.max_model_len, len);
    total_tokens += len;
  }
  // One more block per request for the partial block at its end.
  total_tokens += static_cast<int64_t>(requests.size()) * config.block_size;
  QS_ASSIGN_OR_RETURN(config.kv_cache_bytes, engine::kv_cache_bytes_for_tokens(
                                                 model.config(), total_tokens, config.block_size));
  QS_ASSIGN_OR_RETURN(auto engine,
                      engine::Engine::create(model, &tokenizer, eos_ids, pool, config));
  const auto t0 = std::chrono::steady_clock::now();
  for (const engine::EngineRequest& r : requests) QS_RETURN_IF_ERROR(engine->add_request(r));
  ThroughputRun run;
  while (engine->has_unfinished()) {
    for (const engine::RequestOutput& out : engine->step()) {
      QS_RETURN_IF_ERROR(out.error);
      run.output_tokens += static_cast<int64_t>(out.new_token_ids.size());
    }
  }
  run.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const engine::EngineRequest& r : requests)
    run.prompt_tokens += static_cast<int64_t>(r.prompt_ids.size());
  return run;
}

Status run(const Flags& flags) {
  if (flags.get("model").empty()) return invalid_argument("--model DIR is required");
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, flags.get("model")));
  QS_ASSIGN_OR_RETURN(int threads, thread_count(flags));
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
  std::string tokenizer_id;
  QS_ASSIGN_OR_RETURN(auto tokenizer, load_bench_tokenizer(flags, {dir}, &tokenizer_id));
  QS_ASSIGN_OR_RETURN(std::vector<bench::SampleRequest> samples, load_dataset(flags, *tokenizer));
  QS_ASSIGN_OR_RETURN(const models::LoadOptions load, load_options_from_flags(flags));
  QS_ASSIGN_OR_RETURN(auto model, models::Model::load(dir, load));
  QS_ASSIGN_OR_RETURN(io::GenerationConfig gen, io::read_generation_config(dir));

  std::vector<engine::EngineRequest> requests;
  for (size_t i = 0; i < samples.size(); ++i) {
    engine::EngineRequest r;
    r.id = "throughput-" + std::to_string(i);
    // LLM.generate tokenizes a text prompt with the tokenizer's special tokens (BOS).
    r.prompt_ids = tokenizer->encode(samples[i].prompt, /*add_special_tokens=*/true);
    r.params.temperature = 1.0f;
    r.params.top_p = 1.0f;
    r.params.ignore_eos = true;
    r.params.max_tokens = static_cast<int32_t>(samples[i].expected_output_len);
    r.params.seed = static_cast<uint64_t>(seed) + i;
    requests.push_back(std::move(r));
  }
  QS_ASSIGN_OR_RETURN(
      ThroughputRun run,
      generate_all(*model, *tokenizer, engine::merged_eos_ids(model->config(), gen, *tokenizer),
                   threads, requests));
  const int64_t total = run.prompt_tokens + run.output_tokens;
  const double n = static_cast<double>(requests.size());
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
              n / run.elapsed_s, total / run.elapsed_s, run.output_tokens / run.elapsed_s);
  std::printf("Total num prompt tokens:  %lld\n", static_cast<long long>(run.prompt_tokens));
  std::printf("Total num output tokens:  %lld\n", static_cast<long long>(run.output_tokens));
  if (flags.has("output-json")) {
    const nlohmann::json j = {{"elapsed_time", run.elapsed_s},
                              {"num_requests", requests.size()},
                              {"total_num_tokens", total},
                              {"requests_per_second", n / run.elapsed_s},
                              {"tokens_per_second", total / run.elapsed_s}};
    QS_RETURN_IF_ERROR(write_json(flags.get("output-json"), j));
  }
  return ok_status();
}

}  // namespace

int bench_throughput(const Args& args) {
  Flags flags;
  flags.add("model", "checkpoint directory")
      .add("tokenizer", "tokenizer directory (default: --model)")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()))
      .add("output-json", "also write vLLM's throughput JSON to this file");
  add_dataset_flags(flags);
  add_model_flags(flags);
  return run_command(
      "bench throughput", flags, args, [](const Flags&) { return ok_status(); }, run);
}

}  // namespace qs::apps
