// kernels/cuda: cublaslt_plan.h. Host code only; a .cu so that it builds with the other CUDA
// sources (QS_CUDA), where cuBLASLt's headers are.
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "kernels/cuda/cublaslt_plan.h"

namespace qs::kernels::cuda {
namespace {

CudaStatus runtime_status(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return {};
  return {static_cast<int>(e),
          std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

// Preference for the heuristic: our workspace, and the operands' real alignments.
struct Preference {
  const CublasLtApi* lt;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref != nullptr) lt->cublasLtMatmulPreferenceDestroy(pref);
  }
};

}  // namespace

uint32_t operand_alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && u % a != 0) a /= 2;
  return a;
}

CublasLtPlan::~CublasLtPlan() {
  if (d != nullptr) lt->cublasLtMatrixLayoutDestroy(d);
  if (b != nullptr) lt->cublasLtMatrixLayoutDestroy(b);
  if (a != nullptr) lt->cublasLtMatrixLayoutDestroy(a);
  if (op != nullptr) lt->cublasLtMatmulDescDestroy(op);
}

CublasLtContext::~CublasLtContext() {
  if (workspace != nullptr) cudaFree(workspace);
  if (handle != nullptr) lt->cublasLtDestroy(handle);
}

CudaStatus CublasLtContext::init(size_t bytes) {
  CudaStatus s = cublaslt_api(&lt);
  if (!s.ok()) return s;
  s = lt->check(lt->cublasLtCreate(&handle), "cublasLtCreate");
  if (!s.ok()) {
    // cuBLASLt says only "not initialized" where there is no GPU; the runtime knows why.
    std::string reason;
    if (device_count(&reason) == 0) s.message += " (" + reason + ")";
    return s;
  }
  if (bytes > 0) {
    s = runtime_status(cudaMalloc(&workspace, bytes), "cudaMalloc");
    if (!s.ok()) {
      s.message += " (cuBLASLt workspace of " + std::to_string(bytes) + " bytes)";
      return s;
    }
  }
  workspace_bytes = bytes;
  return {};
}

CudaStatus CublasLtContext::make_plan(
    const CublasLtPlanShape& shape,
    const std::function<CudaStatus(cublasLtMatmulDesc_t)>& set_epilogue, CublasLtPlan& plan) const {
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  plan.lt = lt;
  CudaStatus s = lt->check(lt->cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                           "cublasLtMatmulDescCreate");
  if (s.ok()) {
    s = lt->check(lt->cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                     sizeof(trans_a)),
                  "cublasLtMatmulDescSetAttribute(TRANSA)");
  }
  if (s.ok()) {
    s = lt->check(lt->cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                     sizeof(trans_b)),
                  "cublasLtMatmulDescSetAttribute(TRANSB)");
  }
  if (s.ok()) s = set_epilogue(plan.op);
  const auto m = static_cast<uint64_t>(shape.m), n = static_cast<uint64_t>(shape.n),
             k = static_cast<uint64_t>(shape.k);
  if (s.ok()) {
    s = lt->check(lt->cublasLtMatrixLayoutCreate(&plan.a, shape.a_type, k, n, shape.k),
                  "cublasLtMatrixLayoutCreate(W)");
  }
  if (s.ok()) {
    s = lt->check(lt->cublasLtMatrixLayoutCreate(&plan.b, shape.b_type, k, m, shape.k),
                  "cublasLtMatrixLayoutCreate(x)");
  }
  if (s.ok()) {
    s = lt->check(lt->cublasLtMatrixLayoutCreate(&plan.d, shape.d_type, n, m, shape.n),
                  "cublasLtMatrixLayoutCreate(y)");
  }
  if (!s.ok()) return s;

  Preference p{lt};
  s = lt->check(lt->cublasLtMatmulPreferenceCreate(&p.pref), "cublasLtMatmulPreferenceCreate");
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, shape.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, shape.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, shape.align_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, shape.align_d}};
  for (const auto& [attr, value] : aligns) {
    if (s.ok()) {
      s = lt->check(lt->cublasLtMatmulPreferenceSetAttribute(p.pref, attr, &value, sizeof(value)),
                    "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
    }
  }
  if (s.ok()) {
    const uint64_t ws = workspace_bytes;
    s = lt->check(lt->cublasLtMatmulPreferenceSetAttribute(
                      p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                  "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  }
  if (!s.ok()) return s;
  cublasLtMatmulHeuristicResult_t result{};
  int n_results = 0;
  s = lt->check(lt->cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.d, plan.d,
                                                   p.pref, 1, &result, &n_results),
                "cublasLtMatmulAlgoGetHeuristic");
  if (!s.ok()) return s;
  if (n_results == 0) {
    return {static_cast<int>(CUBLAS_STATUS_NOT_SUPPORTED),
            std::string("cublasLtMatmulAlgoGetHeuristic: no algorithm for the ") + shape.what +
                " m=" + std::to_string(shape.m) + " n=" + std::to_string(shape.n) +
                " k=" + std::to_string(shape.k)};
  }
  plan.algo = result.algo;
  return {};
}

CudaStatus CublasLtContext::matmul(const CublasLtPlan& plan, const void* a, const void* b, void* d,
                                   Stream stream) const {
  const float alpha = 1.0f, beta = 0.0f;
  return lt->check(
      lt->cublasLtMatmul(handle, plan.op, &alpha, a, plan.a, b, plan.b, &beta, d, plan.d, d, plan.d,
                         &plan.algo, workspace, workspace_bytes, stream),
      "cublasLtMatmul");
}

}  // namespace qs::kernels::cuda
