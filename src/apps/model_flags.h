// apps: the model-loading flags every command that loads a checkpoint shares (generate, chat,
// bench latency, inspect), defined once here. Today that is vLLM's --quantization: empty means
// "detect from the checkpoint"; a name must agree with what detection finds (the loader
// checks it, io::check_requested_quantization).
#pragma once

#include "apps/flags.h"
#include "models/model.h"

namespace qs::apps {

// Adds --quantization NAME.
void add_model_flags(Flags& flags);

// The load options those flags ask for.
models::LoadOptions load_options_from_flags(const Flags& flags);

}  // namespace qs::apps
