// core: Tensor helpers.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/check.h"

namespace qs {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Tensor::is_contiguous() const {
  if (strides.empty()) return true;
  int64_t expect = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

int64_t Tensor::stride(int i) const {
  const int d = i < 0 ? rank() + i : i;
  QS_CHECK(d >= 0 && d < rank());
  if (!strides.empty()) return strides[d];
  int64_t s = 1;
  for (int j = rank() - 1; j > d; --j) s *= shape[j];
  return s;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  // 64-byte alignment so SIMD kernels may use aligned loads on rows of aligned sizes.
  const size_t bytes = (t.nbytes() + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  // Sizes come from input (a KV cache budget, a checkpoint's shapes): running out of memory
  // is the caller's error to report (Python's MemoryError), not an invariant to abort on.
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes == 0 ? 64 : bytes);
  t.data = p;
  t.writable_data = p;
  t.owner = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return t;
}

Tensor Tensor::from_f32(DType dtype, std::vector<int64_t> shape, const std::vector<float>& values) {
  Tensor t = zeros(dtype, std::move(shape));
  QS_CHECK(static_cast<int64_t>(values.size()) == t.numel());
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::kF32:
        t.mutable_ptr<float>()[i] = values[i];
        break;
      case DType::kF16:
        t.mutable_ptr<uint16_t>()[i] = f32_to_f16(values[i]);
        break;
      case DType::kBF16:
        t.mutable_ptr<uint16_t>()[i] = f32_to_bf16(values[i]);
        break;
      case DType::kF8E4M3:
        t.mutable_ptr<uint8_t>()[i] = f32_to_fp8_e4m3(values[i]);
        break;
      case DType::kF8E5M2:
        t.mutable_ptr<uint8_t>()[i] = f32_to_fp8_e5m2(values[i]);
        break;
      default:
        QS_CHECK_MSG(false, "from_f32 needs a float dtype");
    }
  }
  return t;
}

std::vector<float> Tensor::to_f32() const {
  QS_CHECK_MSG(is_cpu() && is_contiguous(), "to_f32 reads contiguous host tensors only");
  std::vector<float> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = load_as_f32(dtype, data, i);
  return out;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace qs
