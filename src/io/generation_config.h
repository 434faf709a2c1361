// io: generation_config.json, the sampling defaults a Hugging Face checkpoint ships with.
// Every field is optional (absent means "the engine's default"); eos_token_id may be one id
// or a list, as in transformers. A type error names the file and the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::io {

struct GenerationConfig {
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // empty when the file names none
  std::optional<int64_t> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;         // >= 0
  std::optional<double> top_p;               // in (0, 1]
  std::optional<int64_t> top_k;              // >= 0; transformers treats 0 as "no top-k"
  std::optional<double> repetition_penalty;  // > 0
  std::optional<int64_t> max_new_tokens;     // > 0
};

// `source` names the origin in error messages (usually the file path).
Result<GenerationConfig> parse_generation_config(const nlohmann::json& value,
                                                 const std::string& source);
// Reads <dir>/generation_config.json. A checkpoint without one gets an empty config, as in
// transformers; a file that exists but is malformed is an error.
Result<GenerationConfig> read_generation_config(const std::string& dir);
// The inverse of parse_generation_config: only the fields that are set are written.
nlohmann::json generation_config_to_json(const GenerationConfig& config);

}  // namespace qs::io
