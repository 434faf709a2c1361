// Test glue for the W4A16 layout (kernels/cuda/w4a16_layout.h): ops' own translation from
// formats (ops/cuda_weights.h, what the CUDA backend packs at load) under the tests' names, and
// a host buffer aligned for the packed layout.
#pragma once

#include <cstdlib>
#include <memory>

#include "core/dtype.h"
#include "formats/quantized_weight.h"
#include "kernels/cuda/w4a16_layout.h"
#include "ops/cuda_weights.h"

namespace qs::kernels::cuda {

// A host buffer of at least `bytes`, 256-byte aligned as the packed layout wants.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t bytes)
      : data(static_cast<uint8_t*>(
                 std::aligned_alloc(kW4Align, (bytes + kW4Align) / kW4Align * kW4Align)),
             &std::free) {}
  std::unique_ptr<uint8_t, decltype(&std::free)> data;
};

using ops::cuda::W4A16Glue;

inline W4ScaleType scale_type_of(DType t) {
  return ops::cuda::w4_scale_type(t);
}

inline W4A16Glue w4a16_glue(const formats::QuantizedWeight& w, W4ScaleType scale_type) {
  return ops::cuda::w4a16_source(w, scale_type);
}

}  // namespace qs::kernels::cuda
