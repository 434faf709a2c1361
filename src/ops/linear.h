// ops: linear layers. Validates shapes and dtypes once, then hands pointers to the fastest
// kernel this CPU has (kernels/cpu), or to the scalar reference (kernels/ref).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace qs::ops {

// y[i, :] = x[i, :] @ w^T + bias for i in [0, m).
//   x: [m, k] f32, w: [n, k] (F32, F16 or BF16, as nn.Linear stores it), bias: [n] f32 or
//   nullptr, y: [m, n] f32. Work is split over the pool's threads.
Status linear(const float* x, int64_t m, const Tensor& w, const float* bias, float* y,
              ThreadPool& pool);

// The same with the kernel ISA named instead of kernels::active_isa(), so that tests and
// benchmarks can compare every variant in one process. Fails if this CPU lacks `isa`.
Status linear_with_isa(kernels::Isa isa, const float* x, int64_t m, const Tensor& w,
                       const float* bias, float* y, ThreadPool& pool);

}  // namespace qs::ops
