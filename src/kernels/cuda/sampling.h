// kernels/cuda: the reductions over a row of logits that sampling on the GPU needs, so that
// only a token id (greedy) or a row's normaliser, not the vocabulary, goes back to the host.
// The semantics are engine/sampler.cc's: torch.argmax's tie rule, NaN never chosen. Device
// pointers, one block per row, queued on `stream`.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_runtime.h"

namespace qs::kernels::cuda {

// out[i] = the lowest index of the largest value of row i of x [m, n]; a NaN never wins, and
// a row with no value above -inf gives 0.
CudaStatus argmax_rows(const float* x, int64_t m, int64_t n, int32_t* out, Stream stream);

// The softmax normaliser of each row at temperature 1 / inv_temperature: with
// l[j] = x[i, j] * inv_temperature (a NaN taken as -inf, never drawn),
//   row_max[i] = max_j l[j],  row_sum_exp[i] = sum_j exp(l[j] - row_max[i]).
// row_sum_exp is 0 where row_max is not finite (every value -inf, or one +inf): the rows the
// sampler takes greedily.
CudaStatus row_max_sum_exp(const float* x, int64_t m, int64_t n, float inv_temperature,
                           float* row_max, float* row_sum_exp, Stream stream);

}  // namespace qs::kernels::cuda
