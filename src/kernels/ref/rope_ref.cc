// kernels/ref: interleaved-pair rotary embedding (see rope_ref.h).
#include "kernels/ref/rope_ref.h"

namespace qs::kernels::ref {

void rope_interleaved(float* x, int64_t n_tokens, int64_t stride, int64_t n_heads, int64_t head_dim,
                      const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x + t * stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cos[t * half + i], s = sin[t * half + i];
        const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
        xh[2 * i] = x0 * c - x1 * s;
        xh[2 * i + 1] = x1 * c + x0 * s;
      }
    }
  }
}

}  // namespace qs::kernels::ref
