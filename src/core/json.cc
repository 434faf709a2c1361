// core: JSON file helpers (see json.h).
#include "core/json.h"

#include <cmath>
#include <utility>

#include "core/mmap_file.h"

namespace qs {
namespace {

using nlohmann::json;

// 1-based line and column of byte offset `pos` in `text`.
std::pair<size_t, size_t> line_and_column(const std::string& text, size_t pos) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

}  // namespace

Result<json> read_json(const std::string& path) {
  QS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based and points at the character that broke the parse.
    auto [line, column] = line_and_column(text, e.byte == 0 ? 0 : e.byte - 1);
    // what() is "[json.exception.parse_error.N] parse error at ...: <reason>"; keep the reason.
    std::string reason = e.what();
    if (auto colon = reason.find(": "); colon != std::string::npos) {
      reason = reason.substr(colon + 2);
    }
    return data_loss(path + ":" + std::to_string(line) + ":" + std::to_string(column) +
                     ": invalid JSON: " + reason);
  } catch (const json::exception& e) {
    // Valid syntax the parser still refuses, e.g. 1e999 (out_of_range.406, number overflow):
    // it is not a parse_error, and escaping here would end the process.
    return data_loss(path + ": invalid JSON: " + e.what());
  }
}

std::string json_string_or(const json& j, const std::string& key, const std::string& fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool json_bool_or(const json& j, const std::string& key, bool fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

Status write_json(const std::string& path, const json& value) {
  std::string text;
  try {
    text = value.dump(2) + "\n";
  } catch (const json::exception& e) {
    // A string that is not UTF-8 (type_error 316): the value was built from a binary file
    // whose reader should have refused it; an error here keeps that from ending the process.
    return data_loss(path + ": cannot be written as JSON: " + e.what());
  }
  return write_file(path, text);
}

Result<std::optional<int64_t>> json_integral(const nlohmann::json& obj, const char* field,
                                             const std::string& source) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<int64_t>();
  if (it->is_number_integer() &&
      !(it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    return std::optional<int64_t>(it->get<int64_t>());
  }
  if (it->is_number_float()) {
    const double v = it->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15) {
      return std::optional<int64_t>(static_cast<int64_t>(v));
    }
  }
  return invalid_argument(source + ": '" + field + "' must be an integer, found " + it->dump());
}

Status json_check_range(int64_t value, int64_t lo, int64_t hi, const std::string& field,
                        const std::string& source) {
  if (value >= lo && value <= hi) return ok_status();
  return invalid_argument(source + ": '" + field + "' is " + std::to_string(value) + ", outside [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

}  // namespace qs
