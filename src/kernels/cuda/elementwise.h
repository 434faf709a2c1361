// kernels/cuda: the per-token ops of a decoder on the GPU, with the semantics of
// ops/elementwise.h (and kernels/ref, their oracle): RMSNorm, rotate-half RoPE, SiLU gate,
// residual add, plus the embedding lookup and the f32 -> bf16 conversion that feeds cuBLAS.
// Every pointer is device memory; each call queues its kernel on `stream` and returns the
// launch's status. Inputs are not checked here: the ops layer validates shapes once.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/device_runtime.h"

namespace qs::kernels::cuda {

// y[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight, m rows of d. y may alias x.
CudaStatus rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y,
                    Stream stream);

// In place, the Hugging Face rotate-half convention: x [n_tokens, n_heads, head_dim],
// cos, sin [n_tokens, head_dim / 2]; (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
CudaStatus rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                            const float* cos, const float* sin, Stream stream);

// out[i] = silu(gate[i]) * up[i], n values; out may alias gate.
CudaStatus silu_mul(const float* gate, const float* up, int64_t n, float* out, Stream stream);

// y[i] += x[i], n values.
CudaStatus add_inplace(float* y, const float* x, int64_t n, Stream stream);

// out[t, :] = row ids[t] - row_offset of `table` [n_rows, hidden] (F32, BF16 or F16) as f32,
// for t < n_ids; an id outside [row_offset, row_offset + n_rows) leaves its row of out as it
// was (a vocabulary-parallel shard fills only its own rows, and a bad id reads nothing).
CudaStatus embedding_gather(const void* table, DType dtype, int64_t n_rows, int64_t hidden,
                            const int32_t* ids, int64_t n_ids, int64_t row_offset, float* out,
                            Stream stream);

// y[i] = bf16(x[i]), round to nearest even (core's f32_to_bf16, bit for bit).
CudaStatus cast_f32_to_bf16(const float* x, int64_t n, uint16_t* y, Stream stream);

}  // namespace qs::kernels::cuda
