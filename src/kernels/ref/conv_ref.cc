// kernels/ref: direct 2-D and 3-D convolution and nearest upsampling (see conv_ref.h).
#include "kernels/ref/conv_ref.h"

namespace qs::kernels::ref {

void conv2d(const float* x, const Conv2dShape& s, const float* weight, const float* bias,
            float* y) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t co = 0; co < s.c_out; ++co) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bias ? bias[co] : 0.0;
          for (int64_t ci = 0; ci < s.c_in; ++ci) {
            for (int64_t u = 0; u < s.kh; ++u) {
              const int64_t r = i * s.stride + u - s.pad_top;
              if (r < 0 || r >= s.h) continue;
              for (int64_t v = 0; v < s.kw; ++v) {
                const int64_t q = j * s.stride + v - s.pad_left;
                if (q < 0 || q >= s.w) continue;
                acc += static_cast<double>(x[((b * s.c_in + ci) * s.h + r) * s.w + q]) *
                       weight[((co * s.c_in + ci) * s.kh + u) * s.kw + v];
              }
            }
          }
          y[((b * s.c_out + co) * oh + i) * ow + j] = static_cast<float>(acc);
        }
      }
    }
  }
}

void conv3d(const float* x, const Conv3dShape& s, const float* weight, const float* bias,
            float* y) {
  const int64_t ot = s.out_t(), oh = s.out_h(), ow = s.out_w();
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t co = 0; co < s.c_out; ++co) {
      for (int64_t f = 0; f < ot; ++f) {
        for (int64_t i = 0; i < oh; ++i) {
          for (int64_t j = 0; j < ow; ++j) {
            double acc = bias ? bias[co] : 0.0;
            for (int64_t ci = 0; ci < s.c_in; ++ci) {
              for (int64_t a = 0; a < s.kt; ++a) {
                const int64_t tt = f * s.stride_t + a - s.pad_front;
                if (tt < 0 || tt >= s.t) continue;
                for (int64_t u = 0; u < s.kh; ++u) {
                  const int64_t r = i * s.stride_h + u - s.pad_top;
                  if (r < 0 || r >= s.h) continue;
                  for (int64_t v = 0; v < s.kw; ++v) {
                    const int64_t q = j * s.stride_w + v - s.pad_left;
                    if (q < 0 || q >= s.w) continue;
                    acc += static_cast<double>(
                               x[(((b * s.c_in + ci) * s.t + tt) * s.h + r) * s.w + q]) *
                           weight[(((co * s.c_in + ci) * s.kt + a) * s.kh + u) * s.kw + v];
                  }
                }
              }
            }
            y[(((b * s.c_out + co) * ot + f) * oh + i) * ow + j] = static_cast<float>(acc);
          }
        }
      }
    }
  }
}

void upsample_nearest2x(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, float* y) {
  for (int64_t p = 0; p < n * c; ++p) {
    for (int64_t i = 0; i < 2 * h; ++i) {
      for (int64_t j = 0; j < 2 * w; ++j) {
        y[(p * 2 * h + i) * 2 * w + j] = x[(p * h + i / 2) * w + j / 2];
      }
    }
  }
}

}  // namespace qs::kernels::ref
