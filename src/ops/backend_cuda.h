// ops: the CUDA backend's entry points (backend_cuda.cc). Built with its kernels
// (kernels/cuda) where the build has QS_CUDA; elsewhere backend_built() is false and
// backend_for(cuda) explains so.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "ops/backend.h"

namespace qs::ops::cuda {

bool backend_built();
// GPUs the CUDA runtime sees; 0 with the runtime's reason in *why_none (no driver, no device).
int device_count(std::string* why_none = nullptr);
// The backend of GPU `index` (< device_count()).
Result<std::shared_ptr<Backend>> make_backend(int index);

}  // namespace qs::ops::cuda
