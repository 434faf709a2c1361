// kernels/cuda: cuBLASLt, opened with dlopen on first use instead of linked. The library is
// ~500 MiB on disk and costs ~90 MiB of private memory and ~0.1 s as soon as it is mapped, so
// a linked one taxed every CPU-only run and stopped the binary from starting at all where the
// CUDA libraries are missing. cuBLASLt's header still gives the types and the functions'
// signatures (compile time only); the few functions the linears call (cublaslt_plan.cu,
// gemm_cublas.cu, fp8_gemm.cu) are resolved with dlsym into CublasLtApi. For .cu files: includes
// CUDA's headers.
#pragma once

#include <cublasLt.h>

#include <span>
#include <string>

#include "kernels/cuda/device_runtime.h"

namespace qs::kernels::cuda {

// One pointer per cuBLASLt function the kernels call, named as cuBLASLt names it, with the
// header's own signature.
struct CublasLtApi {
  decltype(&::cublasLtGetVersion) cublasLtGetVersion = nullptr;
  decltype(&::cublasLtGetStatusName) cublasLtGetStatusName = nullptr;
  decltype(&::cublasLtGetStatusString) cublasLtGetStatusString = nullptr;
  decltype(&::cublasLtCreate) cublasLtCreate = nullptr;
  decltype(&::cublasLtDestroy) cublasLtDestroy = nullptr;
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) cublasLtMatmulDescDestroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) cublasLtMatrixLayoutDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) cublasLtMatmulPreferenceSetAttribute = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic = nullptr;
  decltype(&::cublasLtMatmul) cublasLtMatmul = nullptr;

  // A cuBLASLt result as a CudaStatus: "<call>: <status name>: <description>" on failure.
  CudaStatus check(cublasStatus_t s, const char* call) const;
};

// The process's cuBLASLt, loaded by the first call (thread-safe) and kept loaded until exit:
// the first of libcublasLt.so.<major of the headers this build used>, the same file in the
// toolkit's library directory found at configure time, and libcublasLt.so that opens, has
// every function and reports the headers' major version. A failure names each file tried
// with dlerror()'s reason (CUBLAS_STATUS_NOT_INITIALIZED) and is returned again by every
// later call. *api stays valid for the life of the process.
CudaStatus cublaslt_api(const CublasLtApi** api);

// The same from an explicit list of names or paths, as dlopen takes them, each tried in turn;
// loads again on every call (the library handle is never closed). cublaslt_api() uses it once
// with the list above; tests pass names that must fail.
CudaStatus load_cublaslt(std::span<const std::string> candidates, CublasLtApi* api);

}  // namespace qs::kernels::cuda
