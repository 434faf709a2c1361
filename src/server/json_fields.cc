// server: JSON field readers (see json_fields.h).
#include "server/json_fields.h"

#include <cmath>
#include <limits>

namespace qs::server {

std::optional<ApiError> type_error(const std::string& key, const char* expected) {
  return bad_request("'" + key + "' must be " + expected + ".", key);
}

std::optional<ApiError> read_bool(const Json& body, const std::string& key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return type_error(key, "a boolean");
  *out = it->get<bool>();
  return std::nullopt;
}

// Integers as JSON integers, or floats with an integral value (pydantic's lax mode).
std::optional<ApiError> as_int(const Json& v, const std::string& key, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad_request("'" + key + "' is too large.", key);
    }
    *out = v.get<int64_t>();
    return std::nullopt;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
      *out = static_cast<int64_t>(d);
      return std::nullopt;
    }
  }
  return type_error(key, "an integer");
}

std::optional<ApiError> read_int(const Json& body, const std::string& key, int64_t* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  return as_int(*it, key, out);
}

std::optional<ApiError> read_float(const Json& body, const std::string& key, float* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return type_error(key, "a number");
  *out = static_cast<float>(it->get<double>());
  return std::nullopt;
}

std::optional<ApiError> read_string(const Json& body, const std::string& key, std::string* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return type_error(key, "a string");
  *out = it->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> parse_body(const std::string& body, Json* out) {
  *out = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return bad_request("The request body is not valid JSON.");
  if (!out->is_object()) return bad_request("The request body must be a JSON object.");
  return std::nullopt;
}

}  // namespace qs::server
