// python: a Status that is not ok becomes a Python exception of the quantserve.Error family
// (quantserve/errors.py holds the classes and says which code maps to which), carrying the
// message the CLI prints for the same failure, and an allocation that fails becomes MemoryError.
// The interpreter keeps running.
#pragma once

#include <nanobind/nanobind.h>

#include <new>

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

// Raises MemoryError: "out of memory while <what> ...". Needs the GIL.
[[noreturn]] void throw_memory_error(const char* what);

// Runs f() with the GIL released and returns its result. Sizes that users set (a KV cache, a
// checkpoint, a batch, an image) can exhaust memory anywhere below; core code reports that as
// std::bad_alloc (never a QS_CHECK abort, and ThreadPool hands a worker's to its caller), and
// it is caught here, with the GIL taken back by the release guard's destructor, and raised as
// MemoryError saying what was under way (nanobind's own would say only "std::bad_alloc").
template <typename F>
auto without_gil(const char* what, F&& f) -> decltype(f()) {
  try {
    nanobind::gil_scoped_release release;
    return f();
  } catch (const std::bad_alloc&) {
    throw_memory_error(what);
  }
}

}  // namespace qs::py
