// kernels/cuda: device_runtime.h in a build without QS_CUDA. No device is ever reported, and
// every call fails saying how to build one that has them, so that code above can ask the same
// questions in every build. With QS_CUDA, device_runtime.cu defines these instead.
#include "kernels/cuda/device_runtime.h"

#if !defined(QS_HAVE_CUDA)

namespace qs::kernels::cuda {
namespace {

// Not a CUDA error value: no CUDA call was made.
constexpr int kNotBuilt = -1;

CudaStatus not_built(const char* call) {
  return {kNotBuilt, std::string(call) +
                         ": this build has no CUDA (configure with -DQS_CUDA=ON, nvcc on PATH)"};
}

}  // namespace

bool built_with_cuda() {
  return false;
}

int device_count(std::string* reason) {
  if (reason != nullptr) *reason = "this build has no CUDA (configured with -DQS_CUDA=OFF)";
  return 0;
}

CudaStatus device_info(int, DeviceInfo*) {
  return not_built("device_info");
}
CudaStatus set_device(int) {
  return not_built("set_device");
}
CudaStatus device_synchronize() {
  return not_built("device_synchronize");
}
CudaStatus device_malloc(void**, size_t) {
  return not_built("device_malloc");
}
CudaStatus device_free(void* ptr) {
  return ptr == nullptr ? CudaStatus{} : not_built("device_free");
}
CudaStatus host_malloc_pinned(void**, size_t) {
  return not_built("host_malloc_pinned");
}
CudaStatus host_free_pinned(void* ptr) {
  return ptr == nullptr ? CudaStatus{} : not_built("host_free_pinned");
}
CudaStatus copy_async(void*, const void*, size_t, CopyKind, Stream) {
  return not_built("copy_async");
}
CudaStatus copy(void*, const void*, size_t, CopyKind, Stream) {
  return not_built("copy");
}
CudaStatus memset_async(void*, int, size_t, Stream) {
  return not_built("memset_async");
}
CudaStatus stream_create(Stream*) {
  return not_built("stream_create");
}
CudaStatus stream_destroy(Stream) {
  return not_built("stream_destroy");
}
CudaStatus stream_synchronize(Stream) {
  return not_built("stream_synchronize");
}
CudaStatus last_error() {
  return {};
}

}  // namespace qs::kernels::cuda

#endif  // !QS_HAVE_CUDA
