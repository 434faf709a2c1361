// apps: the model-loading flags every command that loads a checkpoint shares (generate, chat,
// bench latency, inspect), defined once here: vLLM's --quantization (empty means "detect from
// the checkpoint"; a name must agree with what detection finds, io::check_requested_quantization),
// vLLM's --device (auto|cpu|cuda|cuda:N, ops::resolve_device) and --lm-head-dtype
// (models/lm_head_int8.h; the loader checks the value). The commands that run the engine (generate,
// chat, bench latency/throughput, serve, eval) also share vLLM's
// --kv-cache-dtype.
#pragma once

#include "apps/flags.h"
#include "core/dtype.h"
#include "models/model.h"

namespace qs::apps {

// Adds --quantization NAME, --lm-head-dtype auto|int8, --device and --revision.
void add_model_flags(Flags& flags);

// Adds --revision REV: which snapshot of a Hugging Face repo id to load from the hub cache (a
// branch or tag through refs/, or a commit hash; default main).
void add_revision_flag(Flags& flags);

// The directory to load for the model named `name` (a local directory, or a repo id found in
// the Hugging Face cache at --revision when the command has that flag): io::resolve_model_dir.
Result<std::string> resolve_model_flag(const Flags& flags, const std::string& name);

// The load options those flags ask for; an unknown or unavailable --device is an error.
Result<models::LoadOptions> load_options_from_flags(const Flags& flags);

// Adds --kv-cache-dtype auto|bfloat16|fp8|fp8_e4m3|fp8_e5m2 (default auto).
void add_kv_cache_dtype_flag(Flags& flags);

// The cache dtype it names (engine::parse_kv_cache_dtype), or its error.
Result<DType> kv_cache_dtype_from_flags(const Flags& flags);

}  // namespace qs::apps
