// python: Status to Python exceptions (see py_status.h).
#include "py_status.h"

namespace nb = nanobind;

namespace qs::py {
namespace {

// The class in quantserve/errors.py for each code.
const char* exception_name(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return "InvalidArgumentError";
    case StatusCode::kNotFound:
      return "NotFoundError";
    case StatusCode::kDataLoss:
      return "CorruptFileError";
    case StatusCode::kUnimplemented:
      return "UnsupportedError";
    case StatusCode::kIo:
      return "FileReadError";
    case StatusCode::kOk:
    case StatusCode::kInternal:
    case StatusCode::kUnavailable:
      break;
  }
  return "InternalError";
}

}  // namespace

nb::object status_exception(const Status& status) {
  nb::object errors = nb::module_::import_("quantserve.errors");
  const std::string& m = status.message();
  return errors.attr(exception_name(status.code()))(nb::str(m.data(), m.size()));
}

void throw_memory_error(const char* what) {
  PyErr_Format(PyExc_MemoryError, "out of memory while %s (an allocation failed: std::bad_alloc)",
               what);
  throw nb::python_error();
}

void throw_status(const Status& status) {
  nb::object exc = status_exception(status);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw nb::python_error();
}

}  // namespace qs::py
