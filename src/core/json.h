// core: reading and writing JSON files (nlohmann/json) with errors that name the file, line
// and column, and lookups that a hostile file cannot turn into an exception. Every layer that
// reads config.json, tokenizer.json or a request body uses these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs {

// Reads and parses a JSON file; a parse error names the file, line and column.
Result<nlohmann::json> read_json(const std::string& path);
Status write_json(const std::string& path, const nlohmann::json& value);

// A member of a JSON object, or `fallback` when `j` is no object, lacks the key or holds
// another type there. nlohmann's value() throws in the last two cases (type_error 302/306),
// which a hostile file reaches with `"type": true`.
std::string json_string_or(const nlohmann::json& j, const std::string& key,
                           const std::string& fallback);
bool json_bool_or(const nlohmann::json& j, const std::string& key, bool fallback);

// An integer member of `obj`, or nullopt when absent or null. Python writes some integers as
// floats (16000.0): an integral float is taken, 0.5 is not. Errors name `source` and the field.
Result<std::optional<int64_t>> json_integral(const nlohmann::json& obj, const char* field,
                                             const std::string& source);
// `value` within [lo, hi], else an error naming `source`, the field and the range.
Status json_check_range(int64_t value, int64_t lo, int64_t hi, const std::string& field,
                        const std::string& source);

}  // namespace qs
