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

// How a product's operands are rounded. kF32 multiplies them as they are. kBf16 rounds both to
// bf16 (nearest even) and accumulates in f32: what torch computes for a matmul under bf16
// autocast, the auto-round tool's CPU default (amp=True). AVX512-BF16's vdpbf16ps runs it at
// twice the f32 FMA rate; on a CPU without it the rounded operands go through the f32 kernels
// (the same products, summed in another order).
enum class Products { kF32, kBf16 };
const char* products_name(Products p);  // "f32" / "bf16"

// C[m, n] (+)= A * B as kernels::GemmArgs describes it (strided A and B, row-major C with a
// leading dimension, so per-head slices of attention tensors and W^T need no copy). With
// pool == nullptr the call runs on the calling thread (for callers already inside a parallel
// job).
Status gemm(const kernels::GemmArgs& args, ThreadPool* pool, Products products = Products::kF32);

// The same with the kernel ISA named instead of kernels::active_isa(), so that tests can
// compare every variant in one process. Fails if this CPU lacks `isa`.
Status gemm_with_isa(kernels::Isa isa, const kernels::GemmArgs& args, ThreadPool* pool,
                     Products products = Products::kF32);

// Whether `isa` runs bf16 products on a kernel of their own (vdpbf16ps) rather than through
// rounded copies and the f32 kernels.
bool bf16_products_native(kernels::Isa isa);

// Contiguous operands: a is [m, k], or [k, m] when a_transposed; b [k, n]; c [m, n].
kernels::GemmArgs gemm_args(const float* a, bool a_transposed, const float* b, float* c, int64_t m,
                            int64_t n, int64_t k, bool accumulate);

}  // namespace qs::ops
