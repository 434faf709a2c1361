// core: error values. Anything a user or a file can get wrong travels as a Status or a
// Result<T> carrying a precise message (file, tensor, expected vs found); invariants of
// our own code use QS_CHECK (check.h) instead.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace qs {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller sent something malformed (HTTP body, CLI flag)
  kNotFound,         // a file or tensor that should be there is not
  kDataLoss,         // a file is truncated or lies about its own layout
  kUnimplemented,    // valid input that we do not support (yet)
  kOutOfRange,       // e.g. a prompt longer than the context
  kInternal,
  kIo,
  kUnavailable,  // a peer this process depends on (another rank) died or stopped answering
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

  // Prepends context ("loading model.safetensors: ") while keeping the code.
  Status with_context(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() {
  return Status();
}
inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
inline Status data_loss(std::string m) {
  return {StatusCode::kDataLoss, std::move(m)};
}
inline Status unimplemented(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status out_of_range(std::string m) {
  return {StatusCode::kOutOfRange, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}
inline Status io_error(std::string m) {
  return {StatusCode::kIo, std::move(m)};
}
inline Status unavailable(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}

const char* status_code_name(StatusCode code);

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    // Always on: with NDEBUG an assert would let value() read an empty optional (UB).
    QS_CHECK_MSG(!status_.ok(), "Result built from an ok Status carries no value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace qs

#define QS_CONCAT_INNER(a, b) a##b
#define QS_CONCAT(a, b) QS_CONCAT_INNER(a, b)

#define QS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::qs::Status qs_status_ = (expr);        \
    if (!qs_status_.ok()) return qs_status_; \
  } while (0)

#define QS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// QS_ASSIGN_OR_RETURN(auto x, make_x()); returns the error from the enclosing function.
#define QS_ASSIGN_OR_RETURN(lhs, expr) \
  QS_ASSIGN_OR_RETURN_IMPL(QS_CONCAT(qs_result_, __LINE__), lhs, expr)
