// kernels/cuda: the CUDA runtime as the CUDA backend uses it (devices, memory, copies,
// streams), behind a plain C++ header: callers compile without nvcc or CUDA's headers. Every
// call returns a CudaStatus instead of aborting; with no driver or no GPU, device_count() is 0
// with the reason. A build without QS_CUDA has these functions too, reporting why they cannot
// run (device_runtime_absent.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// CUDA's own stream type (cudaStream_t is CUstream_st*), declared here so that the kernels'
// headers can take a stream without including CUDA's.
struct CUstream_st;

namespace qs::kernels::cuda {

using Stream = CUstream_st*;  // null: the device's default (legacy) stream

// The outcome of a runtime or cuBLASLt call. The caller turns a failure into a qs::Status;
// after a kernel fault (an illegal address) the device's context is unusable, and every later
// call returns that error again.
struct CudaStatus {
  int code = 0;         // the library's error value (cudaError_t, cublasStatus_t); 0 is success
  std::string message;  // "<call>: <error name>: <description>"
  bool ok() const { return code == 0; }
};

// Whether this build has the CUDA kernels (QS_CUDA); without them every call below fails.
bool built_with_cuda();

// GPUs this process can use. 0, never a crash, where the build has no CUDA, no NVIDIA driver
// is installed, the driver is older than the CUDA runtime the build links, or no GPU is
// visible (CUDA_VISIBLE_DEVICES); `reason` (if not null) then says which.
int device_count(std::string* reason = nullptr);

struct DeviceInfo {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int cc_major = 0;  // compute capability: 8.0 A100, 8.9 RTX 4090, 9.0 H100
  int cc_minor = 0;
  int64_t total_memory_bytes = 0;
  int n_sms = 0;
};
CudaStatus device_info(int device, DeviceInfo* info);

// Makes `device` current for the calling thread (the runtime's state is per thread).
CudaStatus set_device(int device);
// Waits for all work on the current device.
CudaStatus device_synchronize();

CudaStatus device_malloc(void** ptr, size_t bytes);
CudaStatus device_free(void* ptr);  // null is a no-op
// Page-locked host memory: copies from and to it run asynchronously with the host.
CudaStatus host_malloc_pinned(void** ptr, size_t bytes);
CudaStatus host_free_pinned(void* ptr);

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// Ordered on `stream`; from or to pageable host memory the runtime may complete it before
// returning, from or to pinned memory it returns at once.
CudaStatus copy_async(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream);
// The same, returning once the bytes have arrived (and all earlier work on `stream` is done).
CudaStatus copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream);
// Sets `bytes` bytes at dst (device memory) to `value`, ordered on `stream`.
CudaStatus memset_async(void* dst, int value, size_t bytes, Stream stream);

CudaStatus stream_create(Stream* stream);  // non-blocking with respect to the default stream
CudaStatus stream_destroy(Stream stream);
CudaStatus stream_synchronize(Stream stream);

// The error of the last runtime call or kernel launch on this thread, and clears it (a kernel
// fault stays: see CudaStatus). The kernels' launchers return it after each launch.
CudaStatus last_error();

}  // namespace qs::kernels::cuda
