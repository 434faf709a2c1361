// apps: the sampling flags that `generate` and `chat` share (vLLM / llama.cpp spelling), how
// they combine with generation_config.json (flag, else the checkpoint's value, else the
// default: vLLM's precedence).
#pragma once

#include <cstdint>

#include "apps/flags.h"
#include "engine/sampler.h"
#include "io/generation_config.h"

namespace qs::apps {

// Adds --max-tokens, --temperature, --top-p, --top-k, --min-p, the three penalties, --seed,
// --stop (repeatable) and --threads.
void add_sampling_flags(Flags& flags, int64_t default_max_tokens);

// Malformed numbers are usage errors, found before anything loads.
Status check_sampling_flag_values(const Flags& flags);

Status sampling_params_from_flags(const Flags& flags, const io::GenerationConfig& gen,
                                  int64_t default_max_tokens, SamplingParams* params);

// --threads, checked to be in [1, 1024].
Result<int> thread_count(const Flags& flags);

}  // namespace qs::apps
