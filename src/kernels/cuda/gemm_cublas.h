// kernels/cuda: the dense bf16 linear through cuBLASLt, y = x W^T + bias, with the weight
// as nn.Linear stores it ([out_features, in_features], row-major). The caller owns a
// CublasLtGemm per device: the library handle, its workspace and the plans of the shapes seen
// so far (layouts and the algorithm cuBLASLt's heuristic picked), so that a decode step's
// repeated shapes skip the heuristic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/device_runtime.h"

namespace qs::kernels::cuda {

class CublasLtGemm {
 public:
  // workspace_bytes of device memory for the algorithms that split k (NVIDIA recommends 32 MiB
  // on Hopper, 4 MiB before it); 0 restricts cuBLASLt to algorithms that need none. Uses the
  // current device.
  static CudaStatus create(size_t workspace_bytes, std::unique_ptr<CublasLtGemm>* out);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // y[m, n] = x[m, k] W[n, k]^T + bias[n] (bias may be null), f32 accumulation.
  //   x, w: bf16 (as uint16_t bits), row-major; bias, y: f32. All device memory.
  // Not thread-safe (the plan cache); one per stream that uses it concurrently.
  CudaStatus linear_bf16(const uint16_t* x, const uint16_t* w, const float* bias, int64_t m,
                         int64_t n, int64_t k, float* y, Stream stream);

 private:
  struct Impl;
  explicit CublasLtGemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace qs::kernels::cuda
