// python: a Status that is not ok becomes a Python exception of the quantserve.Error family
// (quantserve/errors.py holds the classes and says which code maps to which), carrying the
// message the CLI prints for the same failure. The interpreter keeps running.
#pragma once

#include <nanobind/nanobind.h>

#include "core/status.h"

namespace qs::py {

// The exception for `status` (not ok), ready to raise.
nanobind::object status_exception(const Status& status);

// Raises it: sets the Python error and throws nanobind::python_error.
[[noreturn]] void throw_status(const Status& status);

// The value of an ok Result, else throw_status.
template <typename T>
T value_or_throw(Result<T> result) {
  if (!result.ok()) throw_status(result.status());
  return std::move(*result);
}

inline void check_ok(const Status& status) {
  if (!status.ok()) throw_status(status);
}

}  // namespace qs::py
