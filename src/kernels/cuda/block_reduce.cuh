// kernels/cuda: sums and maxima across a warp and across a thread block, for the kernels that
// give one block to a row (RMSNorm, the sampling reductions). A block reduces in two shuffle
// rounds, warps first, then the warps' results in one warp, so it needs one barrier pair and
// 32 floats of shared memory whatever its size.
#pragma once

namespace qs::kernels::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullWarp, v, offset);
  }
  return v;
}

// fmaxf ignores a NaN operand, so a NaN never becomes the maximum.
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  }
  return v;
}

// The block's total in every thread. blockDim.x must be a multiple of 32; `scratch` holds 32
// floats of shared memory, free again when the function returns (the leading barrier lets
// consecutive calls share it).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < n_warps ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < n_warps ? scratch[lane] : -__int_as_float(0x7f800000));
}

}  // namespace qs::kernels::cuda
