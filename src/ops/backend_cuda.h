// ops: the CUDA backend's entry point (backend_cuda.cc), which ops::backend_for calls once it
// has checked that the build has the CUDA kernels and the machine the GPU.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "ops/backend.h"

namespace qs::ops::cuda {

// The backend of GPU `index` (< device_count()).
Result<std::shared_ptr<Backend>> make_backend(int index);

}  // namespace qs::ops::cuda
