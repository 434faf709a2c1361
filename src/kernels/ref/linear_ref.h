// kernels/ref: the scalar oracle for the linear kernels. Obvious loops, f32 accumulation in
// k order; every fast kernel is tested against these on random inputs.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace qs::kernels::ref {

// y[i, j] = sum_k x[i, k] * w[j, k] for rows i in [0, m) and output columns j in
// [n_begin, n_end). x: [m, k] f32; w: [n, k] in w_dtype (F32, F16 or BF16); y: [m, n].
void linear(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            int64_t n_begin, int64_t n_end, float* y);

}  // namespace qs::kernels::ref
