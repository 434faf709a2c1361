// python: the quantizer for quantserve.AutoRound (quantserve/autoround.py). QuantizeSetup holds
// the options `quantserve quantize` would build from the same settings (auto-round's names);
// its run() calls the same quant::quantize, so a checkpoint made from Python has the bytes of
// the command's, with the GIL released and Ctrl-C checked between tensors and blocks.
#pragma once

#include <nanobind/nanobind.h>

namespace qs::py {

// Adds QuantizeSetup to the module.
void bind_quantize(nanobind::module_& m);

}  // namespace qs::py
