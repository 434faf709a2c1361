// python: Ctrl-C for long engine calls that run with the GIL released. Python's own SIGINT
// handler only sets a flag, and the KeyboardInterrupt it stands for is raised by
// PyErr_CheckSignals, which needs the GIL. The engine's `cancelled` callbacks (FluxPipeline
// after each step, quant::quantize between tensors and blocks) call an InterruptPoll, which
// takes the GIL for that moment, asks, and keeps the exception; the binding raises it once the
// engine has stopped and cleaned up.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <optional>

namespace qs::py {

class InterruptPoll {
 public:
  // For the engine, from any thread, with the GIL released: true once the user pressed
  // Ctrl-C (or a signal handler of theirs raised). Only the main thread runs handlers; a poll
  // from another thread then sees nothing, and the next one from the main thread does.
  bool operator()();

  // With the GIL held, after the engine call: raises what a poll caught, if anything.
  void raise_if_interrupted();

 private:
  std::atomic<bool> interrupted_{false};
  std::optional<nanobind::python_error> error_;  // written once, under the GIL
};

}  // namespace qs::py
