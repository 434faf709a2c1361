// python: the FLUX pipeline for quantserve.Omni (quantserve/omni.py): FluxCore loads a diffusers
// pipeline directory and makes one image per call, the GIL released while it runs and Ctrl-C
// checked after every denoising step.
#pragma once

#include <nanobind/nanobind.h>

namespace qs::py {

// Adds FluxCore and resolve_model_dir to the module.
void bind_diffusion(nanobind::module_& m);

}  // namespace qs::py
