// kernels/cuda: elementwise.h. The flat ops run one thread per element over a grid-stride
// loop (consecutive threads touch consecutive floats, so every load is coalesced); RMSNorm and
// the embedding lookup give a block to a row.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/float_codecs.cuh"

namespace qs::kernels::cuda {
namespace {

constexpr int kFlatThreads = 256;
// Enough blocks to fill any of the GPUs we target several times over; larger arrays loop.
constexpr int64_t kMaxFlatBlocks = 8192;

int flat_blocks(int64_t n) {
  return static_cast<int>(std::min(kMaxFlatBlocks, (n + kFlatThreads - 1) / kFlatThreads));
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// One block per row. The sum of squares is f32 (the CPU's oracle sums in double): each thread
// adds d / blockDim values, then the block tree adds the partial sums, so the error grows with
// log(d) rather than d. x and y may alias: each thread rewrites only the elements it read.
__global__ void rms_norm_kernel(const float* x, int64_t d, const float* weight, float eps,
                                float* y) {
  __shared__ float scratch[kWarpSize];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * d;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = x[row + j];
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) y[row + j] = weight[j] * (x[row + j] * inv);
}

// One thread per rotated pair (token, head, j < half). The products and sums are rounded one
// by one (no fused multiply-add), as the CPU's scalar oracle computes them: the results match
// it bit for bit.
__global__ void rope_kernel(float* x, int64_t n_pairs, int64_t n_heads, int64_t head_dim,
                            const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t p = global_thread(); p < n_pairs; p += grid_threads()) {
    const int64_t j = p % half, token_head = p / half, token = token_head / n_heads;
    float* v = x + token_head * head_dim;
    const float c = cos[token * half + j], s = sin[token * half + j];
    const float x1 = v[j], x2 = v[j + half];
    v[j] = __fadd_rn(__fmul_rn(x1, c), -__fmul_rn(x2, s));
    v[j + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void add_inplace_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] += x[i];
}

// The table's element types, read as f32.
struct ReadF32 {
  using T = float;
  __device__ static float load(float v) { return v; }
};
struct ReadBF16 {
  using T = uint16_t;
  __device__ static float load(uint16_t v) { return bf16_bits_to_f32(v); }
};
struct ReadF16 {
  using T = uint16_t;
  __device__ static float load(uint16_t v) { return f16_bits_to_f32(v); }
};

// One block per id; its threads read the table row in order.
template <class Read>
__global__ void embedding_kernel(const typename Read::T* table, int64_t n_rows, int64_t hidden,
                                 const int32_t* ids, int64_t row_offset, float* out) {
  const int64_t row = static_cast<int64_t>(ids[blockIdx.x]) - row_offset;
  if (row < 0 || row >= n_rows) return;
  const typename Read::T* src = table + row * hidden;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) dst[j] = Read::load(src[j]);
}

__global__ void f32_to_bf16_kernel(const float* x, int64_t n, uint16_t* y) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = f32_to_bf16_bits(x[i]);
}

// Threads for a block that owns a row of d floats: about four values per thread, in whole
// warps (block_sum's requirement), at most 1024.
int row_threads(int64_t d) {
  const int64_t warps = (d + 4 * kWarpSize - 1) / (4 * kWarpSize);
  return static_cast<int>(std::clamp<int64_t>(warps, 1, 32) * kWarpSize);
}

}  // namespace

CudaStatus rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y,
                    Stream stream) {
  if (m == 0 || d == 0) return {};
  rms_norm_kernel<<<static_cast<unsigned>(m), row_threads(d), 0, stream>>>(x, d, weight, eps, y);
  return last_error();
}

CudaStatus rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                            const float* cos, const float* sin, Stream stream) {
  const int64_t n_pairs = n_tokens * n_heads * (head_dim / 2);
  if (n_pairs == 0) return {};
  rope_kernel<<<flat_blocks(n_pairs), kFlatThreads, 0, stream>>>(x, n_pairs, n_heads, head_dim, cos,
                                                                 sin);
  return last_error();
}

CudaStatus silu_mul(const float* gate, const float* up, int64_t n, float* out, Stream stream) {
  if (n == 0) return {};
  silu_mul_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(gate, up, n, out);
  return last_error();
}

CudaStatus add_inplace(float* y, const float* x, int64_t n, Stream stream) {
  if (n == 0) return {};
  add_inplace_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(y, x, n);
  return last_error();
}

CudaStatus embedding_gather(const void* table, DType dtype, int64_t n_rows, int64_t hidden,
                            const int32_t* ids, int64_t n_ids, int64_t row_offset, float* out,
                            Stream stream) {
  if (n_ids == 0 || hidden == 0) return {};
  const auto grid = static_cast<unsigned>(n_ids);
  const int threads = row_threads(hidden);
  switch (dtype) {
    case DType::kF32:
      embedding_kernel<ReadF32><<<grid, threads, 0, stream>>>(static_cast<const float*>(table),
                                                              n_rows, hidden, ids, row_offset, out);
      break;
    case DType::kBF16:
      embedding_kernel<ReadBF16><<<grid, threads, 0, stream>>>(
          static_cast<const uint16_t*>(table), n_rows, hidden, ids, row_offset, out);
      break;
    case DType::kF16:
      embedding_kernel<ReadF16><<<grid, threads, 0, stream>>>(static_cast<const uint16_t*>(table),
                                                              n_rows, hidden, ids, row_offset, out);
      break;
    default:
      return {static_cast<int>(cudaErrorInvalidValue),
              std::string("embedding_gather: no kernel for a table of ") + dtype_name(dtype)};
  }
  return last_error();
}

CudaStatus cast_f32_to_bf16(const float* x, int64_t n, uint16_t* y, Stream stream) {
  if (n == 0) return {};
  f32_to_bf16_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(x, n, y);
  return last_error();
}

}  // namespace qs::kernels::cuda
