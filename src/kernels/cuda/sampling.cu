// kernels/cuda: sampling.h. A block of up to 1024 threads per row: a vocabulary of 150k
// logits is about 150 strided reads per thread, then one block reduction.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/sampling.h"

namespace qs::kernels::cuda {
namespace {

// About eight values per thread, in whole warps, at most 1024 threads.
int sampling_threads(int64_t n) {
  const int64_t warps = (n + 8 * kWarpSize - 1) / (8 * kWarpSize);
  return static_cast<int>(std::clamp<int64_t>(warps, 1, 32) * kWarpSize);
}

// (value, index) ordered by value, then by lower index: the maximum of this order is the
// lowest index of the largest value. Comparisons with a NaN are false, so it never wins.
__device__ __forceinline__ void keep_better(float& v, int& i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}

__global__ void argmax_kernel(const float* x, int64_t n, int32_t* out) {
  __shared__ float values[kWarpSize];
  __shared__ int indices[kWarpSize];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  // Each thread scans its indices in increasing order with a strict >, so it keeps the first
  // of equal values; INT_MAX stands for "nothing above -inf yet".
  float best = -__int_as_float(0x7f800000);
  int best_i = INT_MAX;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    if (row[j] > best) {
      best = row[j];
      best_i = static_cast<int>(j);
    }
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    keep_better(best, best_i, __shfl_xor_sync(kFullWarp, best, offset),
                __shfl_xor_sync(kFullWarp, best_i, offset));
  }
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    values[warp] = best;
    indices[warp] = best_i;
  }
  __syncthreads();
  if (warp != 0) return;
  const int n_warps = blockDim.x / kWarpSize;
  best = lane < n_warps ? values[lane] : -__int_as_float(0x7f800000);
  best_i = lane < n_warps ? indices[lane] : INT_MAX;
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    keep_better(best, best_i, __shfl_xor_sync(kFullWarp, best, offset),
                __shfl_xor_sync(kFullWarp, best_i, offset));
  }
  if (lane == 0) out[blockIdx.x] = best_i == INT_MAX ? 0 : best_i;
}

// Two passes over the row, the maximum then the sum: the second reads the row from L2.
__global__ void max_sum_exp_kernel(const float* x, int64_t n, float inv_temperature, float* row_max,
                                   float* row_sum_exp) {
  __shared__ float scratch[kWarpSize];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  const float neg_inf = -__int_as_float(0x7f800000);
  float mx = neg_inf;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, row[j] * inv_temperature);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  if (isfinite(mx)) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float l = row[j] * inv_temperature;
      if (!isnan(l)) sum += expf(l - mx);
    }
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    row_max[blockIdx.x] = mx;
    row_sum_exp[blockIdx.x] = sum;
  }
}

}  // namespace

CudaStatus argmax_rows(const float* x, int64_t m, int64_t n, int32_t* out, Stream stream) {
  if (m == 0) return {};
  argmax_kernel<<<static_cast<unsigned>(m), sampling_threads(n), 0, stream>>>(x, n, out);
  return last_error();
}

CudaStatus row_max_sum_exp(const float* x, int64_t m, int64_t n, float inv_temperature,
                           float* row_max, float* row_sum_exp, Stream stream) {
  if (m == 0) return {};
  max_sum_exp_kernel<<<static_cast<unsigned>(m), sampling_threads(n), 0, stream>>>(
      x, n, inv_temperature, row_max, row_sum_exp);
  return last_error();
}

}  // namespace qs::kernels::cuda
