// core: names for status codes, used in CLI messages and HTTP error bodies.
#include "core/status.h"

namespace qs {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kDataLoss:
      return "data loss";
    case StatusCode::kUnimplemented:
      return "unimplemented";
    case StatusCode::kOutOfRange:
      return "out of range";
    case StatusCode::kInternal:
      return "internal error";
    case StatusCode::kIo:
      return "i/o error";
    case StatusCode::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace qs
