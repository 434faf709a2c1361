// apps: shared sampling flags.
#include "apps/sampling_flags.h"

#include <climits>
#include <optional>
#include <string>

#include "core/thread_pool.h"

namespace qs::apps {

void add_sampling_flags(Flags& flags, int64_t default_max_tokens) {
  flags
      .add("max-tokens", "tokens to generate at most", false,
           std::to_string(default_max_tokens) + " or generation_config.json")
      .add("temperature", "0 = greedy", false, "1.0 or generation_config.json")
      .add("top-p", "nucleus sampling mass")
      .add("top-k", "keep the k most likely tokens (0 or -1 = all)")
      .add("min-p", "drop tokens below min-p x the top probability")
      .add("repetition-penalty", "> 1 discourages tokens already in prompt or output")
      .add("presence-penalty", "subtracted once from each generated token")
      .add("frequency-penalty", "subtracted per occurrence in the output")
      .add("seed", "RNG seed (same seed, same output)")
      .add("stop", "stop string (repeatable)")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()));
}

Status check_sampling_flag_values(const Flags& flags) {
  for (const char* name : {"max-tokens", "top-k", "seed", "threads"}) {
    if (flags.has(name)) QS_RETURN_IF_ERROR(flags.get_int(name).status());
  }
  for (const char* name : {"temperature", "top-p", "min-p", "repetition-penalty",
                           "presence-penalty", "frequency-penalty"}) {
    if (flags.has(name)) QS_RETURN_IF_ERROR(flags.get_double(name).status());
  }
  return ok_status();
}

Status sampling_params_from_flags(const Flags& flags, const io::GenerationConfig& gen,
                                  int64_t default_max_tokens, SamplingParams* p) {
  auto pick = [&](const char* flag, std::optional<double> from_config, float* out) -> Status {
    if (flags.has(flag)) {
      QS_ASSIGN_OR_RETURN(double v, flags.get_double(flag));
      *out = static_cast<float>(v);
    } else if (from_config) {
      *out = static_cast<float>(*from_config);
    }
    return ok_status();
  };
  QS_RETURN_IF_ERROR(pick("temperature", gen.temperature, &p->temperature));
  QS_RETURN_IF_ERROR(pick("top-p", gen.top_p, &p->top_p));
  QS_RETURN_IF_ERROR(pick("min-p", std::nullopt, &p->min_p));
  QS_RETURN_IF_ERROR(pick("repetition-penalty", gen.repetition_penalty, &p->repetition_penalty));
  QS_RETURN_IF_ERROR(pick("presence-penalty", std::nullopt, &p->presence_penalty));
  QS_RETURN_IF_ERROR(pick("frequency-penalty", std::nullopt, &p->frequency_penalty));
  if (flags.has("top-k")) {
    QS_ASSIGN_OR_RETURN(int64_t k, flags.get_int("top-k"));
    if (k < -1 || k > INT32_MAX) {
      return invalid_argument("--top-k must be -1, 0 or a positive count, got " +
                              std::to_string(k));
    }
    p->top_k = static_cast<int32_t>(k);
  } else if (gen.top_k) {
    p->top_k = static_cast<int32_t>(*gen.top_k);  // transformers' 0 means off, as ours
  }
  int64_t max_tokens = gen.max_new_tokens.value_or(default_max_tokens);
  if (flags.has("max-tokens")) {
    QS_ASSIGN_OR_RETURN(max_tokens, flags.get_int("max-tokens"));
  }
  if (max_tokens < 1 || max_tokens > INT32_MAX) {
    return invalid_argument("--max-tokens must be in [1, " + std::to_string(INT32_MAX) + "], got " +
                            std::to_string(max_tokens));
  }
  p->max_tokens = static_cast<int32_t>(max_tokens);
  if (flags.has("seed")) {
    QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
    p->seed = static_cast<uint64_t>(seed);
  }
  p->stop = flags.get_all("stop");
  return ok_status();
}

Result<int> thread_count(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  if (threads < 1 || threads > 1024) {
    return invalid_argument("--threads must be in [1, 1024], got " + std::to_string(threads));
  }
  return static_cast<int>(threads);
}

}  // namespace qs::apps
