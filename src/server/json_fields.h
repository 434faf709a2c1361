// server: readers for the fields of a JSON request body, shared by every endpoint's parser
// (openai_request.cc, images_request.cc). Absent or null leaves *out as it is; a value of the
// wrong type is a 400 naming the field (a parser may re-status it, e.g. images' 422).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "server/openai_request.h"

namespace qs::server {

std::optional<ApiError> type_error(const std::string& key, const char* expected);
std::optional<ApiError> read_bool(const Json& body, const std::string& key, bool* out);
// Integers as JSON integers, or floats with an integral value (pydantic's lax mode).
std::optional<ApiError> as_int(const Json& v, const std::string& key, int64_t* out);
std::optional<ApiError> read_int(const Json& body, const std::string& key, int64_t* out);
std::optional<ApiError> read_float(const Json& body, const std::string& key, float* out);
std::optional<ApiError> read_string(const Json& body, const std::string& key, std::string* out);
// The body as a JSON object, or a 400 ("not valid JSON" / "must be a JSON object").
std::optional<ApiError> parse_body(const std::string& body, Json* out);

}  // namespace qs::server
