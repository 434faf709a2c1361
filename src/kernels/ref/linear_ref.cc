// kernels/ref: scalar linear.
#include "kernels/ref/linear_ref.h"

namespace qs::kernels::ref {

void linear(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            int64_t n_begin, int64_t n_end, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = n_begin; j < n_end; ++j) {
      float acc = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) acc += x[i * k + kk] * load_as_f32(w_dtype, w, j * k + kk);
      y[i * n + j] = acc;
    }
  }
}

}  // namespace qs::kernels::ref
