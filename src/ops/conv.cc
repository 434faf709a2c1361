// ops: convolution as im2col + GEMM (see conv.h).
#include "ops/conv.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ops/gemm.h"

namespace qs::ops {

namespace {

// Column buffer budget: [c_in * kh * kw, band * out_w] floats.
constexpr int64_t kIm2colFloats = int64_t{8} << 20;

}  // namespace

Status conv2d(const float* x, const Conv2dShape& s, const float* weight, const float* bias,
              float* y, ThreadPool& pool) {
  if (s.n <= 0 || s.c_in <= 0 || s.h <= 0 || s.w <= 0 || s.c_out <= 0 || s.kh <= 0 || s.kw <= 0 ||
      s.stride <= 0 || s.pad_top < 0 || s.pad_bottom < 0 || s.pad_left < 0 || s.pad_right < 0 ||
      s.out_h() <= 0 || s.out_w() <= 0) {
    return invalid_argument("conv2d: bad shape: input [" + std::to_string(s.n) + ", " +
                            std::to_string(s.c_in) + ", " + std::to_string(s.h) + ", " +
                            std::to_string(s.w) + "], kernel " + std::to_string(s.kh) + "x" +
                            std::to_string(s.kw) + ", stride " + std::to_string(s.stride));
  }
  const int64_t oh = s.out_h(), ow = s.out_w(), kk = s.c_in * s.kh * s.kw;
  const int64_t band = std::clamp<int64_t>(kIm2colFloats / (kk * ow), 1, oh);
  std::vector<float> cols(static_cast<size_t>(kk * band * ow));
  for (int64_t b = 0; b < s.n; ++b) {
    const float* xb = x + b * s.c_in * s.h * s.w;
    float* yb = y + b * s.c_out * oh * ow;
    for (int64_t r0 = 0; r0 < oh; r0 += band) {
      const int64_t rows = std::min(band, oh - r0), np = rows * ow;
      // cols[(ci, u, v), (i, j)] = x[ci, (r0 + i) * stride + u - pad, j * stride + v - pad].
      pool.parallel_for(s.c_in, [&](int64_t c0, int64_t c1) {
        for (int64_t ci = c0; ci < c1; ++ci) {
          for (int64_t u = 0; u < s.kh; ++u) {
            for (int64_t v = 0; v < s.kw; ++v) {
              float* col = cols.data() + ((ci * s.kh + u) * s.kw + v) * np;
              for (int64_t i = 0; i < rows; ++i) {
                const int64_t r = (r0 + i) * s.stride + u - s.pad_top;
                for (int64_t j = 0; j < ow; ++j) {
                  const int64_t q = j * s.stride + v - s.pad_left;
                  col[i * ow + j] = (r < 0 || r >= s.h || q < 0 || q >= s.w)
                                        ? 0.0f
                                        : xb[(ci * s.h + r) * s.w + q];
                }
              }
            }
          }
        }
      });
      float* yr = yb + r0 * ow;
      for (int64_t co = 0; co < s.c_out; ++co) {
        std::fill(yr + co * oh * ow, yr + co * oh * ow + np, bias ? bias[co] : 0.0f);
      }
      // y[co, band] += W[co, kk] * cols[kk, band]; rows of y are oh * ow apart.
      kernels::GemmArgs args{weight, kk, 1, cols.data(), np, yr, oh * ow, s.c_out, np, kk, true};
      QS_RETURN_IF_ERROR(gemm(args, &pool));
    }
  }
  return ok_status();
}

void upsample_nearest2x(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, float* y) {
  kernels::ref::upsample_nearest2x(x, n, c, h, w, y);
}

}  // namespace qs::ops
