// kernels/cuda: what the cuBLASLt GEMMs (gemm_cublas.cu, fp8_gemm.cu) share: a handle with its
// workspace, the plan of one shape (descriptors and the algorithm the heuristic chose) and the
// cache of plans per shape. Both compute the row-major y[m, n] = x[m, k] W[n, k]^T as its
// transpose in cuBLAS's column-major terms, D (n x m, leading dimension n) = op(A) B with A = W
// read as a column-major k x n matrix and transposed, B = x as a column-major k x m matrix; each
// keeps its types, its epilogue attributes and its key. For .cu files: includes CUDA's headers.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "kernels/cuda/cublaslt_loader.h"
#include "kernels/cuda/device_runtime.h"

namespace qs::kernels::cuda {

// The largest power of two up to 256 that divides the address: cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told otherwise, and an algorithm chosen so fails on a view
// that starts inside a buffer.
uint32_t operand_alignment(const void* p);

// One shape's descriptors and the algorithm the heuristic chose for it.
struct CublasLtPlan {
  const CublasLtApi* lt = nullptr;  // set with the first descriptor
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  CublasLtPlan() = default;
  CublasLtPlan(const CublasLtPlan&) = delete;
  CublasLtPlan& operator=(const CublasLtPlan&) = delete;
  ~CublasLtPlan();
};

// A plan's shape and types. C has D's type and layout (beta is 0).
struct CublasLtPlanShape {
  int64_t m, n, k;
  cudaDataType_t a_type, b_type, d_type;
  uint32_t align_a, align_b, align_d;  // operand_alignment of A (W), B (x) and D (y)
  const char* what;                    // the GEMM, in the "no algorithm" error: "bf16 linear"
};

// The plans of the shapes seen so far, by a GEMM's own key.
template <typename Key>
class CublasLtPlans {
 public:
  // The plan for `key`, made by make(plan) the first time; a plan that failed is not kept.
  template <typename Make>
  CudaStatus get(const Key& key, Make&& make, CublasLtPlan** plan) {
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      it = plans_.try_emplace(key).first;
      CudaStatus s = make(it->second);
      if (!s.ok()) {
        plans_.erase(it);
        return s;
      }
    }
    *plan = &it->second;
    return {};
  }

 private:
  std::map<Key, CublasLtPlan> plans_;
};

// The process's cuBLASLt, a handle on the current device and the workspace its algorithms may
// use. Declared before a GEMM's plans, so that they are destroyed first.
struct CublasLtContext {
  const CublasLtApi* lt = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  CublasLtContext() = default;
  CublasLtContext(const CublasLtContext&) = delete;
  CublasLtContext& operator=(const CublasLtContext&) = delete;
  ~CublasLtContext();

  // Loads cuBLASLt, creates the handle and allocates workspace_bytes of device memory (none for
  // 0, which restricts cuBLASLt to algorithms that need none).
  CudaStatus init(size_t workspace_bytes);

  // Fills `plan` for `shape`: f32 compute and scale, A transposed, set_epilogue(op) for the
  // GEMM's own attributes, the layouts, then one algorithm from the heuristic for the
  // operands' alignments and this workspace (CUBLAS_STATUS_NOT_SUPPORTED where there is none).
  CudaStatus make_plan(const CublasLtPlanShape& shape,
                       const std::function<CudaStatus(cublasLtMatmulDesc_t)>& set_epilogue,
                       CublasLtPlan& plan) const;

  // D = 1 * op(A) B + 0 * D with the plan's algorithm, on `stream`; C is D.
  CudaStatus matmul(const CublasLtPlan& plan, const void* a, const void* b, void* d,
                    Stream stream) const;
};

}  // namespace qs::kernels::cuda
