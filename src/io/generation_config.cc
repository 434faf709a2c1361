// io: generation_config.json parsing and writing.
#include "io/generation_config.h"

#include <filesystem>

#include "core/json.h"
#include "core/limits.h"
#include "io/checkpoint.h"

namespace qs::io {
namespace {

using nlohmann::json;

Status type_error(const std::string& source, const char* field, const char* expected,
                  const json& found) {
  return invalid_argument(source + ": '" + field + "' must be " + expected + ", found " +
                          found.dump());
}

// JSON null means "unset" in transformers' files (e.g. "pad_token_id": null).
Status get_int(const json& obj, const std::string& source, const char* field,
               std::optional<int64_t>* out) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return ok_status();
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    return type_error(source, field, "an integer", *it);
  }
  *out = it->get<int64_t>();
  return ok_status();
}

Status get_number(const json& obj, const std::string& source, const char* field,
                  std::optional<double>* out) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return ok_status();
  if (!it->is_number()) return type_error(source, field, "a number", *it);
  *out = it->get<double>();
  return ok_status();
}

Status check_range(bool ok, const std::string& source, const char* field, const char* range) {
  return ok ? ok_status() : invalid_argument(source + ": '" + field + "' must be " + range);
}

}  // namespace

Result<GenerationConfig> parse_generation_config(const json& value, const std::string& source) {
  if (!value.is_object()) {
    return invalid_argument(source + ": expected a JSON object, found " +
                            std::string(value.type_name()));
  }
  GenerationConfig c;
  QS_RETURN_IF_ERROR(get_int(value, source, "bos_token_id", &c.bos_token_id));
  QS_RETURN_IF_ERROR(get_int(value, source, "pad_token_id", &c.pad_token_id));
  QS_RETURN_IF_ERROR(get_int(value, source, "top_k", &c.top_k));
  QS_RETURN_IF_ERROR(get_int(value, source, "max_new_tokens", &c.max_new_tokens));
  QS_RETURN_IF_ERROR(get_number(value, source, "temperature", &c.temperature));
  QS_RETURN_IF_ERROR(get_number(value, source, "top_p", &c.top_p));
  QS_RETURN_IF_ERROR(get_number(value, source, "repetition_penalty", &c.repetition_penalty));
  if (auto it = value.find("do_sample"); it != value.end() && !it->is_null()) {
    if (!it->is_boolean()) return type_error(source, "do_sample", "true or false", *it);
    c.do_sample = it->get<bool>();
  }
  if (auto it = value.find("eos_token_id"); it != value.end() && !it->is_null()) {
    if (it->is_number_integer()) {
      c.eos_token_ids.push_back(it->get<int64_t>());
    } else if (it->is_array()) {
      for (const auto& id : *it) {
        if (!id.is_number_integer()) {
          return type_error(source, "eos_token_id", "an integer or a list of integers", *it);
        }
        c.eos_token_ids.push_back(id.get<int64_t>());
      }
    } else {
      return type_error(source, "eos_token_id", "an integer or a list of integers", *it);
    }
  }
  // Token ids are int32 once loaded: a larger one must not be narrowed silently.
  auto is_token_id = [](const std::optional<int64_t>& id) {
    return !id || (*id >= 0 && *id <= limits::kMaxTokenId);
  };
  const char* id_range = "a token id in 0..2147483647";
  QS_RETURN_IF_ERROR(check_range(is_token_id(c.bos_token_id), source, "bos_token_id", id_range));
  QS_RETURN_IF_ERROR(check_range(is_token_id(c.pad_token_id), source, "pad_token_id", id_range));
  for (int64_t id : c.eos_token_ids) {
    QS_RETURN_IF_ERROR(check_range(is_token_id(id), source, "eos_token_id", id_range));
  }
  QS_RETURN_IF_ERROR(
      check_range(!c.temperature || *c.temperature >= 0, source, "temperature", ">= 0"));
  QS_RETURN_IF_ERROR(
      check_range(!c.top_p || (*c.top_p > 0 && *c.top_p <= 1), source, "top_p", "in (0, 1]"));
  QS_RETURN_IF_ERROR(check_range(!c.top_k || *c.top_k >= 0, source, "top_k", ">= 0"));
  QS_RETURN_IF_ERROR(check_range(!c.repetition_penalty || *c.repetition_penalty > 0, source,
                                 "repetition_penalty", "> 0"));
  QS_RETURN_IF_ERROR(
      check_range(!c.max_new_tokens || *c.max_new_tokens > 0, source, "max_new_tokens", "> 0"));
  return c;
}

Result<GenerationConfig> read_generation_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return GenerationConfig{};
  QS_ASSIGN_OR_RETURN(json value, read_json(path));
  return parse_generation_config(value, path);
}

json generation_config_to_json(const GenerationConfig& c) {
  json j = json::object();
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  if (c.do_sample) j["do_sample"] = *c.do_sample;
  if (c.temperature) j["temperature"] = *c.temperature;
  if (c.top_p) j["top_p"] = *c.top_p;
  if (c.top_k) j["top_k"] = *c.top_k;
  if (c.repetition_penalty) j["repetition_penalty"] = *c.repetition_penalty;
  if (c.max_new_tokens) j["max_new_tokens"] = *c.max_new_tokens;
  return j;
}

}  // namespace qs::io
