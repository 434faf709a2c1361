// ops: the plain f32 matrix products backpropagation needs besides linear()'s x * W^T:
// dX = dY * W and dW = dY^T * X (quant/ AutoRound). Checks the call once, picks the kernel for
// the active ISA (AVX-512 > AVX2 > scalar reference) and splits the rows of C over the pool.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/gemm_args.h"

namespace qs::ops {

// C[m, n] (+)= A * B as kernels::GemmArgs describes it (strided A, row-major B and C with
// leading dimensions, so per-head slices of attention tensors need no copy). With pool ==
// nullptr the call runs on the calling thread (for callers already inside a parallel job).
Status gemm(const kernels::GemmArgs& args, ThreadPool* pool);

// The same with the kernel ISA named instead of kernels::active_isa(), so that tests can
// compare every variant in one process. Fails if this CPU lacks `isa`.
Status gemm_with_isa(kernels::Isa isa, const kernels::GemmArgs& args, ThreadPool* pool);

// Contiguous operands: a is [m, k], or [k, m] when a_transposed; b [k, n]; c [m, n].
kernels::GemmArgs gemm_args(const float* a, bool a_transposed, const float* b, float* c, int64_t m,
                            int64_t n, int64_t k, bool accumulate);

}  // namespace qs::ops
