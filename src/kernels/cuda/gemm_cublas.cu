// kernels/cuda: gemm_cublas.h. cuBLAS is column-major, so the row-major product
// y[m, n] = x[m, k] W[n, k]^T is computed as its transpose, y^T (n x m, leading dimension n)
// = op(A) B with A = W read as a column-major k x n matrix and transposed, B = x read as a
// column-major k x m matrix: no copy of either operand. The bias then runs along D's rows,
// which is what cuBLASLt's BIAS epilogue adds.
#include <compare>
#include <cstdint>
#include <memory>
#include <utility>

#include "kernels/cuda/cublaslt_plan.h"
#include "kernels/cuda/gemm_cublas.h"

namespace qs::kernels::cuda {
namespace {

struct PlanKey {
  int64_t m, n, k;
  bool bias;
  uint32_t align_x, align_w, align_y;
  auto operator<=>(const PlanKey&) const = default;
};

}  // namespace

struct CublasLtGemm::Impl {
  CublasLtContext ctx;
  CublasLtPlans<PlanKey> plans;

  CudaStatus make_plan(const PlanKey& key, CublasLtPlan& plan) const {
    const CublasLtApi* lt = ctx.lt;
    const auto set_bias_epilogue = [&](cublasLtMatmulDesc_t op) -> CudaStatus {
      if (!key.bias) return {};
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_32F;
      CudaStatus s = lt->check(lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                                  &epilogue, sizeof(epilogue)),
                               "cublasLtMatmulDescSetAttribute(EPILOGUE)");
      if (s.ok()) {
        s = lt->check(lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                         &bias_type, sizeof(bias_type)),
                      "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
      }
      return s;
    };
    const CublasLtPlanShape shape{.m = key.m,
                                  .n = key.n,
                                  .k = key.k,
                                  .a_type = CUDA_R_16BF,
                                  .b_type = CUDA_R_16BF,
                                  .d_type = CUDA_R_32F,
                                  .align_a = key.align_w,
                                  .align_b = key.align_x,
                                  .align_d = key.align_y,
                                  .what = "bf16 linear"};
    return ctx.make_plan(shape, set_bias_epilogue, plan);
  }
};

CublasLtGemm::CublasLtGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CublasLtGemm::~CublasLtGemm() = default;

CudaStatus CublasLtGemm::create(size_t workspace_bytes, std::unique_ptr<CublasLtGemm>* out) {
  auto impl = std::make_unique<Impl>();
  CudaStatus s = impl->ctx.init(workspace_bytes);
  if (!s.ok()) return s;
  out->reset(new CublasLtGemm(std::move(impl)));
  return {};
}

CudaStatus CublasLtGemm::linear_bf16(const uint16_t* x, const uint16_t* w, const float* bias,
                                     int64_t m, int64_t n, int64_t k, float* y, Stream stream) {
  if (m == 0 || n == 0) return {};
  const PlanKey key{
      m, n, k, bias != nullptr, operand_alignment(x), operand_alignment(w), operand_alignment(y)};
  CublasLtPlan* plan = nullptr;
  CudaStatus s = impl_->plans.get(
      key, [&](CublasLtPlan& p) { return impl_->make_plan(key, p); }, &plan);
  if (!s.ok()) return s;
  const CublasLtApi* lt = impl_->ctx.lt;
  if (bias != nullptr) {
    s = lt->check(lt->cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof(bias)),
                  "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    if (!s.ok()) return s;
  }
  return impl_->ctx.matmul(*plan, w, x, y, stream);
}

}  // namespace qs::kernels::cuda
