// engine: the token ids a request stops on by default, as a checkpoint declares them. The CLI
// commands, `serve` and the Python LLM all build their engine's EOS set here, so that the
// same checkpoint stops on the same tokens whichever front end runs it.
#pragma once

#include <cstdint>
#include <vector>

#include "io/generation_config.h"
#include "models/model_config.h"
#include "tokenizer/tokenizer.h"

namespace qs::engine {

// EOS ids from config.json, generation_config.json and the tokenizer, merged (sorted, without
// duplicates) as vLLM merges them: chat models list their end-of-turn token (e.g. <|im_end|>)
// in generation_config.json only, and a base model's tokenizer may name one config.json lacks.
std::vector<int32_t> merged_eos_ids(const models::ModelConfig& config,
                                    const io::GenerationConfig& gen,
                                    const tok::Tokenizer& tokenizer);

}  // namespace qs::engine
