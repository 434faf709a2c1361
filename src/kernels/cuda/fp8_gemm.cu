// kernels/cuda: fp8_gemm.h. The product is computed as gemm_cublas.cu computes the bf16 one,
// as its transpose in cuBLAS's column-major terms: D (n x m, leading dimension n) = op(A) B with
// A = W read as a column-major k x n matrix and transposed, B = x as a column-major k x m
// matrix. That is the "TN" form cuBLASLt's FP8 kernels require, with no copy of either operand.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <compare>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cublaslt_plan.h"
#include "kernels/cuda/float_codecs.cuh"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/fp8_scales.h"

namespace qs::kernels::cuda {
namespace {

CudaStatus runtime_status(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return {};
  return {static_cast<int>(e),
          std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

CudaStatus not_supported(const std::string& why) {
  return {static_cast<int>(CUBLAS_STATUS_NOT_SUPPORTED), why};
}

constexpr int kQuantThreads = 256;

// One block per row: the row's amax (dynamic), its scale, then every code. x * (1 / s) and the
// e4m3 encoder of float_codecs.cuh (core's, bit for bit) make the codes fp8_quantize_rows_ref's.
__global__ void quantize_rows_kernel(const uint16_t* x, int64_t k, const float* static_scale,
                                     uint8_t* q, float* scales) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const uint16_t* xr = x + row * k;
  float s;
  if (static_scale != nullptr) {
    s = *static_scale;
  } else {
    float amax = 0.0f;
    for (int64_t c = threadIdx.x; c < k; c += blockDim.x) {
      amax = fmaxf(amax, fabsf(bf16_bits_to_f32(xr[c])));
    }
    amax = block_max(amax, scratch);
    s = fmaxf(amax / kE4m3Max, kFp8MinTokenScale);
  }
  if (threadIdx.x == 0) scales[row] = s;
  const float inv = 1.0f / s;
  for (int64_t c = threadIdx.x; c < k; c += blockDim.x) {
    q[row * k + c] = f32_to_fp8_e4m3(__fmul_rn(bf16_bits_to_f32(xr[c]), inv));
  }
}

// y[r, j] = d[r, j] * sx[r or 0] * sw[j or 0], in y's type.
__global__ void scale_rows_cols_kernel(const float* d, int64_t m, int64_t n, const float* sx,
                                       bool x_vec, const float* sw, bool w_vec, void* y,
                                       bool y_bf16) {
  const int64_t count = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, j = i % n;
    const float v = d[i] * sx[x_vec ? r : 0] * sw[w_vec ? j : 0];
    if (y_bf16) {
      static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(v);
    } else {
      static_cast<float*>(y)[i] = v;
    }
  }
}

// A is the weight, B the activations (see the file comment); the pointers are device f32
// scalars that cuBLASLt multiplies into the product.
CudaStatus set_scale_pointers(const CublasLtApi& lt, cublasLtMatmulDesc_t op, const float* w_scale,
                              const float* x_scale) {
  CudaStatus s = lt.check(lt.cublasLtMatmulDescSetAttribute(
                              op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale)),
                          "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)");
  if (!s.ok()) return s;
  return lt.check(lt.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                    &x_scale, sizeof(x_scale)),
                  "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
}

struct PlanKey {
  int64_t m, n, k;
  uint32_t align_x, align_w, align_d;
  bool d_f32;       // the product is written as f32 (vector scales, or an f32 y)
  bool scale_ptrs;  // per-tensor scales through cuBLASLt's A/B scale pointers
  auto operator<=>(const PlanKey&) const = default;
};

}  // namespace

CudaStatus fp8_quantize_rows(const uint16_t* x, int64_t m, int64_t k, const float* static_scale,
                             uint8_t* q, float* scales, Stream stream) {
  if (m == 0) return {};
  quantize_rows_kernel<<<static_cast<unsigned>(m), kQuantThreads, 0, stream>>>(x, k, static_scale,
                                                                               q, scales);
  return last_error();
}

struct Fp8Gemm::Impl {
  CublasLtContext ctx;
  CublasLtPlans<PlanKey> plans;

  // `w_scale`, `x_scale`: the call's per-tensor scales when key.scale_ptrs (the heuristic
  // picks among the algorithms that take scale pointers).
  CudaStatus make_plan(const PlanKey& key, const float* w_scale, const float* x_scale,
                       CublasLtPlan& plan) const {
    const auto set_scales = [&](cublasLtMatmulDesc_t op) -> CudaStatus {
      if (!key.scale_ptrs) return {};
      return set_scale_pointers(*ctx.lt, op, w_scale, x_scale);
    };
    // C has D's type (cuBLASLt's FP8 table pairs bf16 with bf16 and f32 with f32); beta = 0.
    const CublasLtPlanShape shape{.m = key.m,
                                  .n = key.n,
                                  .k = key.k,
                                  .a_type = CUDA_R_8F_E4M3,
                                  .b_type = CUDA_R_8F_E4M3,
                                  .d_type = key.d_f32 ? CUDA_R_32F : CUDA_R_16BF,
                                  .align_a = key.align_w,
                                  .align_b = key.align_x,
                                  .align_d = key.align_d,
                                  .what = "fp8 linear"};
    return ctx.make_plan(shape, set_scales, plan);
  }
};

Fp8Gemm::Fp8Gemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Fp8Gemm::~Fp8Gemm() = default;

CudaStatus Fp8Gemm::create(size_t workspace_bytes, std::unique_ptr<Fp8Gemm>* out) {
  int device = 0, major = 0, minor = 0;
  CudaStatus s = runtime_status(cudaGetDevice(&device), "cudaGetDevice");
  if (s.ok()) {
    s = runtime_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                       "cudaDeviceGetAttribute(major)");
  }
  if (s.ok()) {
    s = runtime_status(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                       "cudaDeviceGetAttribute(minor)");
  }
  if (!s.ok()) return s;
  if (!fp8_gemm_supported(major, minor)) {
    return {static_cast<int>(CUBLAS_STATUS_ARCH_MISMATCH),
            "the FP8 GEMM needs FP8 tensor cores (compute capability 8.9 or later); device " +
                std::to_string(device) + " is " + std::to_string(major) + "." +
                std::to_string(minor)};
  }
  auto impl = std::make_unique<Impl>();
  s = impl->ctx.init(workspace_bytes);
  if (!s.ok()) return s;
  out->reset(new Fp8Gemm(std::move(impl)));
  return {};
}

CudaStatus Fp8Gemm::linear(const Fp8GemmArgs& a, Stream stream) {
  if (a.m == 0 || a.n == 0) return {};
  if (a.k % 16 != 0 || a.n % 16 != 0) {
    return not_supported(std::string("the fp8 linear needs k and n multiples of 16 (cuBLASLt's ") +
                         "FP8 alignment), not n=" + std::to_string(a.n) +
                         " k=" + std::to_string(a.k));
  }
  const bool vectors = a.x_per_token || a.w_per_channel;
  // The product's destination: y itself, unless a vector scale must be applied to an f32
  // product that a bf16 y cannot hold.
  void* d = fp8_gemm_needs_scratch(a) ? static_cast<void*>(a.scratch) : a.y;
  const PlanKey key{a.m,
                    a.n,
                    a.k,
                    operand_alignment(a.qx),
                    operand_alignment(a.qw),
                    operand_alignment(d),
                    vectors || !a.y_bf16,
                    !vectors};
  CublasLtPlan* plan = nullptr;
  CudaStatus s = impl_->plans.get(
      key, [&](CublasLtPlan& p) { return impl_->make_plan(key, a.w_scales, a.x_scales, p); },
      &plan);
  if (!s.ok()) return s;
  if (!vectors) {
    s = set_scale_pointers(*impl_->ctx.lt, plan->op, a.w_scales, a.x_scales);
    if (!s.ok()) return s;
  }
  s = impl_->ctx.matmul(*plan, a.qw, a.qx, d, stream);
  if (!s.ok() || !vectors) return s;
  const int64_t count = a.m * a.n;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 4096));
  scale_rows_cols_kernel<<<blocks, 256, 0, stream>>>(static_cast<const float*>(d), a.m, a.n,
                                                     a.x_scales, a.x_per_token, a.w_scales,
                                                     a.w_per_channel, a.y, a.y_bf16);
  return last_error();
}

}  // namespace qs::kernels::cuda
