// kernels/cuda: gemm_cublas.h. cuBLAS is column-major, so the row-major product
// y[m, n] = x[m, k] W[n, k]^T is computed as its transpose, y^T (n x m, leading dimension n)
// = op(A) B with A = W read as a column-major k x n matrix and transposed, B = x read as a
// column-major k x m matrix: no copy of either operand. The bias then runs along D's rows,
// which is what cuBLASLt's BIAS epilogue adds.
#include <cuda_runtime.h>

#include <compare>
#include <map>
#include <string>
#include <utility>

#include "kernels/cuda/cublaslt_loader.h"
#include "kernels/cuda/gemm_cublas.h"

namespace qs::kernels::cuda {
namespace {

CudaStatus runtime_status(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return {};
  return {static_cast<int>(e),
          std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

// The largest power of two up to 256 that divides the address: cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told otherwise, and an algorithm chosen so fails on a view
// that starts inside a buffer.
uint32_t alignment_of(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && u % a != 0) a /= 2;
  return a;
}

struct PlanKey {
  int64_t m, n, k;
  bool bias;
  uint32_t align_x, align_w, align_y;
  auto operator<=>(const PlanKey&) const = default;
};

// One shape's descriptors and the algorithm the heuristic chose for it.
struct Plan {
  const CublasLtApi* lt = nullptr;  // set with the first descriptor
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) lt->cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) lt->cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) lt->cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) lt->cublasLtMatmulDescDestroy(op);
  }
};

// Preference for the heuristic: our workspace, and the operands' real alignments.
struct Preference {
  const CublasLtApi* lt;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref != nullptr) lt->cublasLtMatmulPreferenceDestroy(pref);
  }
};

}  // namespace

struct CublasLtGemm::Impl {
  const CublasLtApi* lt = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<PlanKey, Plan> plans;

  ~Impl() {
    plans.clear();
    if (workspace != nullptr) cudaFree(workspace);
    if (handle != nullptr) lt->cublasLtDestroy(handle);
  }

  CudaStatus make_plan(const PlanKey& key, Plan& plan) const {
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    plan.lt = lt;
    CudaStatus s = lt->check(lt->cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                             "cublasLtMatmulDescCreate");
    if (s.ok()) {
      s = lt->check(lt->cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                       &trans_a, sizeof(trans_a)),
                    "cublasLtMatmulDescSetAttribute(TRANSA)");
    }
    if (s.ok()) {
      s = lt->check(lt->cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                       &trans_b, sizeof(trans_b)),
                    "cublasLtMatmulDescSetAttribute(TRANSB)");
    }
    if (s.ok() && key.bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_32F;
      s = lt->check(lt->cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                       &epilogue, sizeof(epilogue)),
                    "cublasLtMatmulDescSetAttribute(EPILOGUE)");
      if (s.ok()) {
        s = lt->check(
            lt->cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                               &bias_type, sizeof(bias_type)),
            "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
      }
    }
    const auto m = static_cast<uint64_t>(key.m), n = static_cast<uint64_t>(key.n),
               k = static_cast<uint64_t>(key.k);
    if (s.ok()) {
      s = lt->check(lt->cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, k, n, key.k),
                    "cublasLtMatrixLayoutCreate(W)");
    }
    if (s.ok()) {
      s = lt->check(lt->cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, k, m, key.k),
                    "cublasLtMatrixLayoutCreate(x)");
    }
    if (s.ok()) {
      s = lt->check(lt->cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_32F, n, m, key.n),
                    "cublasLtMatrixLayoutCreate(y)");
    }
    if (!s.ok()) return s;

    Preference p{lt};
    s = lt->check(lt->cublasLtMatmulPreferenceCreate(&p.pref), "cublasLtMatmulPreferenceCreate");
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_y},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_y}};
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
    s = lt->check(lt->cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.d,
                                                     plan.d, p.pref, 1, &result, &n_results),
                  "cublasLtMatmulAlgoGetHeuristic");
    if (!s.ok()) return s;
    if (n_results == 0) {
      return {static_cast<int>(CUBLAS_STATUS_NOT_SUPPORTED),
              "cublasLtMatmulAlgoGetHeuristic: no algorithm for the bf16 linear m=" +
                  std::to_string(key.m) + " n=" + std::to_string(key.n) +
                  " k=" + std::to_string(key.k)};
    }
    plan.algo = result.algo;
    return {};
  }
};

CublasLtGemm::CublasLtGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CublasLtGemm::~CublasLtGemm() = default;

CudaStatus CublasLtGemm::create(size_t workspace_bytes, std::unique_ptr<CublasLtGemm>* out) {
  const CublasLtApi* lt = nullptr;
  CudaStatus s = cublaslt_api(&lt);
  if (!s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->lt = lt;
  s = lt->check(lt->cublasLtCreate(&impl->handle), "cublasLtCreate");
  if (!s.ok()) {
    // cuBLASLt says only "not initialized" where there is no GPU; the runtime knows why.
    std::string reason;
    if (device_count(&reason) == 0) s.message += " (" + reason + ")";
    return s;
  }
  if (workspace_bytes > 0) {
    s = runtime_status(cudaMalloc(&impl->workspace, workspace_bytes), "cudaMalloc");
    if (!s.ok()) {
      s.message += " (cuBLASLt workspace of " + std::to_string(workspace_bytes) + " bytes)";
      return s;
    }
  }
  impl->workspace_bytes = workspace_bytes;
  out->reset(new CublasLtGemm(std::move(impl)));
  return {};
}

CudaStatus CublasLtGemm::linear_bf16(const uint16_t* x, const uint16_t* w, const float* bias,
                                     int64_t m, int64_t n, int64_t k, float* y, Stream stream) {
  if (m == 0 || n == 0) return {};
  const PlanKey key{m, n, k, bias != nullptr, alignment_of(x), alignment_of(w), alignment_of(y)};
  auto it = impl_->plans.find(key);
  if (it == impl_->plans.end()) {
    it = impl_->plans.try_emplace(key).first;
    CudaStatus s = impl_->make_plan(key, it->second);
    if (!s.ok()) {
      impl_->plans.erase(it);
      return s;
    }
  }
  Plan& plan = it->second;
  const CublasLtApi* lt = impl_->lt;
  if (bias != nullptr) {
    CudaStatus s = lt->check(lt->cublasLtMatmulDescSetAttribute(
                                 plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                             "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    if (!s.ok()) return s;
  }
  const float alpha = 1.0f, beta = 0.0f;
  return lt->check(
      lt->cublasLtMatmul(impl_->handle, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y, plan.d, y,
                         plan.d, &plan.algo, impl_->workspace, impl_->workspace_bytes, stream),
      "cublasLtMatmul");
}

}  // namespace qs::kernels::cuda
