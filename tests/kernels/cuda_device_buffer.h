// Test helpers for the GPU tests (cuda_*_test.cc): device memory freed on scope exit, uploads
// and downloads of vectors, and the skip where this machine has no usable GPU.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/device_runtime.h"

namespace qs::kernels::cuda {

#define QS_ASSERT_CUDA(expr)                           \
  do {                                                 \
    const ::qs::kernels::cuda::CudaStatus s_ = (expr); \
    ASSERT_TRUE(s_.ok()) << s_.message;                \
  } while (0)

// Skips the calling test (from SetUp or a test body) unless device 0 can be used.
#define QS_SKIP_WITHOUT_GPU()                            \
  do {                                                   \
    std::string why_;                                    \
    if (::qs::kernels::cuda::device_count(&why_) == 0) { \
      GTEST_SKIP() << "no CUDA device: " << why_;        \
    }                                                    \
    QS_ASSERT_CUDA(::qs::kernels::cuda::set_device(0));  \
  } while (0)

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { (void)device_free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CudaStatus alloc(size_t bytes) {
    bytes_ = bytes;
    return device_malloc(&ptr_, bytes == 0 ? 1 : bytes);
  }
  template <typename T>
  CudaStatus upload(const std::vector<T>& host) {
    CudaStatus s = alloc(host.size() * sizeof(T));
    if (!s.ok() || host.empty()) return s;
    return copy(ptr_, host.data(), bytes_, CopyKind::kHostToDevice, nullptr);
  }
  template <typename T>
  CudaStatus download(std::vector<T>* host) const {
    host->resize(bytes_ / sizeof(T));
    return copy(host->data(), ptr_, bytes_, CopyKind::kDeviceToHost, nullptr);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace qs::kernels::cuda
