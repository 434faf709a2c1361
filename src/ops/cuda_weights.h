// ops: how a checkpoint's quantized weight becomes the CUDA kernels' resident form: the one
// place where a formats::QuantizedWeight meets kernels/cuda's W4A16 layout (as qmatrix_pack.h is
// for the CPU's). Host code, built with or without CUDA, so that the packing is tested on every
// machine against formats' dequantization (tests/kernels/w4a16_layout_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "formats/quantized_weight.h"
#include "kernels/cuda/w4a16_layout.h"

namespace qs::ops::cuda {

// The scale type the packed weight keeps: the checkpoint's own (f16, bf16), f32 otherwise, so
// that the scales stay exact.
kernels::cuda::W4ScaleType w4_scale_type(DType scale_dtype);

// A W4A16Source over `w`'s arrays, and the perm it points into: one group per row when the
// group spans k, no zero table when every zero is the same, and for act-order weights (a g_idx
// that is not k / group_size) the inputs sorted by group, stably. `w` must outlive it.
struct W4A16Glue {
  kernels::cuda::W4A16Source src;
  std::vector<int32_t> perm;
};
W4A16Glue w4a16_source(const formats::QuantizedWeight& w, kernels::cuda::W4ScaleType scale_type);

// Whether the W4A16 kernel takes `w` (unsigned codes of at most 4 bits; groups a multiple of
// 16 inputs, or one per row); otherwise an unimplemented error saying why.
Status w4a16_supported(const formats::QuantizedWeight& w);

}  // namespace qs::ops::cuda
