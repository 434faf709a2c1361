// python: quantserve.evaluate (quantserve/evaluate.py): the `quantserve eval` run
// (eval::run_eval) with the GIL released, its result as the JSON text `eval --json` writes.
#pragma once

#include <nanobind/nanobind.h>

namespace qs::py {

// Adds run_eval and default_eval_dataset to the module.
void bind_eval(nanobind::module_& m);

}  // namespace qs::py
