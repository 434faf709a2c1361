// ops: linear front end.
#include "ops/linear.h"

#include "kernels/ref/linear_ref.h"

namespace qs::ops {

Status linear(const float* x, int64_t m, const Tensor& w, const float* bias, float* y,
              ThreadPool& pool) {
  if (w.rank() != 2) {
    return invalid_argument("linear: weight must be 2-d [n, k], got " + shape_string(w.shape));
  }
  if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16) {
    return unimplemented(std::string("linear: no kernel for weight dtype ") + dtype_name(w.dtype));
  }
  const int64_t n = w.dim(0), k = w.dim(1);
  pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    kernels::ref::linear(x, m, k, w.data, w.dtype, n, begin, end, y);
    if (bias != nullptr) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = begin; j < end; ++j) y[i * n + j] += bias[j];
    }
  });
  return ok_status();
}

}  // namespace qs::ops
