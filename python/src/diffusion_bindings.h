// python: the diffusion pipelines for quantserve.Omni (quantserve/omni.py): FluxCore and WanCore
// each load a diffusers pipeline directory (FLUX.1; Wan2.2 text or image to video) and make one
// image or video per call, the GIL released while it runs and Ctrl-C checked after every
// denoising step; encode_mp4 / write_mp4 write a video's frames as generate-video does.
#pragma once

#include <nanobind/nanobind.h>

namespace qs::py {

// Adds FluxCore, WanCore, encode_mp4, write_mp4, pipeline_family and resolve_model_dir to the
// module.
void bind_diffusion(nanobind::module_& m);

}  // namespace qs::py
