// kernels/cuda: device_runtime.h on the CUDA runtime (linked statically: it loads the driver,
// libcuda.so.1, on the first call that needs a device, so a binary with these calls starts
// and runs on a machine without one).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

#include "kernels/cuda/device_runtime.h"

namespace qs::kernels::cuda {
namespace {

CudaStatus status_of(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return {};
  return {static_cast<int>(e),
          std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// The runtime reports a missing driver and an old one alike (cudaErrorInsufficientDriver);
// whether libcuda.so.1 loads, and the CUDA version the driver supports, tell them apart.
std::string why_no_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) return "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded)";
  dlclose(lib);
  int driver = 0;
  cudaDriverGetVersion(&driver);
  return "the NVIDIA driver supports CUDA " + cuda_version_text(driver) + ", older than the CUDA " +
         cuda_version_text(CUDART_VERSION) + " runtime this build links";
}

cudaMemcpyKind memcpy_kind(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice:
      break;
  }
  return cudaMemcpyDeviceToDevice;
}

}  // namespace

bool built_with_cuda() {
  return true;
}

int device_count(std::string* reason) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  // A failed query is not sticky, but it is the thread's last error: cleared, so that the next
  // launcher's last_error() does not report it.
  cudaGetLastError();
  if (e == cudaSuccess && n > 0) return n;
  if (reason != nullptr) {
    if (e == cudaErrorInsufficientDriver) {
      *reason = why_no_driver();
    } else if (e == cudaErrorNoDevice || e == cudaSuccess) {
      *reason = "the NVIDIA driver sees no CUDA GPU (or CUDA_VISIBLE_DEVICES hides them all)";
    } else {
      *reason = status_of(e, "cudaGetDeviceCount").message;
    }
  }
  return 0;
}

CudaStatus device_info(int device, DeviceInfo* info) {
  cudaDeviceProp prop{};
  CudaStatus s = status_of(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  if (!s.ok()) return s;
  info->name = prop.name;
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info->n_sms = prop.multiProcessorCount;
  return {};
}

CudaStatus set_device(int device) {
  return status_of(cudaSetDevice(device), "cudaSetDevice");
}

CudaStatus device_synchronize() {
  return status_of(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

CudaStatus device_malloc(void** ptr, size_t bytes) {
  CudaStatus s = status_of(cudaMalloc(ptr, bytes), "cudaMalloc");
  if (!s.ok()) s.message += " (" + std::to_string(bytes) + " bytes)";
  return s;
}

// Freeing nothing succeeds without a driver too (cudaFree(nullptr) would initialise one).
CudaStatus device_free(void* ptr) {
  if (ptr == nullptr) return {};
  return status_of(cudaFree(ptr), "cudaFree");
}

CudaStatus host_malloc_pinned(void** ptr, size_t bytes) {
  CudaStatus s = status_of(cudaMallocHost(ptr, bytes), "cudaMallocHost");
  if (!s.ok()) s.message += " (" + std::to_string(bytes) + " bytes)";
  return s;
}

CudaStatus host_free_pinned(void* ptr) {
  if (ptr == nullptr) return {};
  return status_of(cudaFreeHost(ptr), "cudaFreeHost");
}

CudaStatus copy_async(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream) {
  return status_of(cudaMemcpyAsync(dst, src, bytes, memcpy_kind(kind), stream), "cudaMemcpyAsync");
}

CudaStatus copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream) {
  CudaStatus s = copy_async(dst, src, bytes, kind, stream);
  return s.ok() ? stream_synchronize(stream) : s;
}

CudaStatus memset_async(void* dst, int value, size_t bytes, Stream stream) {
  return status_of(cudaMemsetAsync(dst, value, bytes, stream), "cudaMemsetAsync");
}

CudaStatus stream_create(Stream* stream) {
  return status_of(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags");
}

CudaStatus stream_destroy(Stream stream) {
  return status_of(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

CudaStatus stream_synchronize(Stream stream) {
  return status_of(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

CudaStatus last_error() {
  return status_of(cudaGetLastError(), "kernel launch");
}

}  // namespace qs::kernels::cuda
