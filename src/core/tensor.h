// core: Tensor, a typed n-d view over bytes that someone else owns (an mmapped checkpoint,
// an arena, a std::vector, a backend's device memory). `owner` keeps that storage alive;
// copying a Tensor is cheap and shares it. Shapes are row-major, outermost first, as in
// PyTorch and safetensors; `strides` are set only on views that are not contiguous (a slice of
// columns), and `device` says who may dereference `data` (core/device.h: host code only when
// it is the CPU).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"

namespace qs {

struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  // Read-only through this pointer: checkpoint weights are views into a read-only mapping
  // (PROT_READ), where a write would fault, so the type does not allow one.
  const void* data = nullptr;
  // The same bytes, writable, only when this process allocated them (zeros, from_f32);
  // null for views into a mapping. Reach it through mutable_ptr().
  void* writable_data = nullptr;
  std::shared_ptr<const void> owner;  // keeps `data` alive; may be null for borrowed views
  Device device = kCpuDevice;
  // Elements between neighbours along each dimension; empty means contiguous row-major.
  std::vector<int64_t> strides;

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  int rank() const { return static_cast<int>(shape.size()); }
  bool empty() const { return data == nullptr; }
  bool is_cpu() const { return device.is_cpu(); }
  // Whether the elements are packed row-major (no strides, or strides that say so).
  bool is_contiguous() const;
  // Elements between neighbours along dimension i (negative counts from the end).
  int64_t stride(int i) const;

  template <typename T>
  const T* ptr() const {
    return static_cast<const T*>(data);
  }
  // For tensors this process filled; asking a read-only view for one is a bug of ours.
  template <typename T>
  T* mutable_ptr() const {
    QS_CHECK_MSG(writable_data != nullptr, "tensor is a read-only view (e.g. of a mapped file)");
    return static_cast<T*>(writable_data);
  }

  // A fresh, zero-filled, owning tensor; throws std::bad_alloc when memory runs out.
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // Copies `values` (f32) into a new tensor of `dtype` (float dtypes only).
  static Tensor from_f32(DType dtype, std::vector<int64_t> shape, const std::vector<float>& values);
  // Element-wise conversion of a float tensor into an owning f32 copy.
  std::vector<float> to_f32() const;
};

// "[896, 4864]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace qs
