// python: Ctrl-C between engine steps (see interrupt_poll.h).
#include "interrupt_poll.h"

namespace nb = nanobind;

namespace qs::py {

bool InterruptPoll::operator()() {
  if (interrupted_.load()) return true;
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return false;
  error_.emplace();  // takes the raised exception (KeyboardInterrupt) off the interpreter
  interrupted_.store(true);
  return true;
}

void InterruptPoll::raise_if_interrupted() {
  if (!error_) return;
  nb::python_error e = std::move(*error_);
  error_.reset();
  throw e;
}

}  // namespace qs::py
