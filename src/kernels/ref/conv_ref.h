// kernels/ref: 2-D convolution and nearest-neighbour 2x upsampling over NCHW f32 images, the
// scalar oracles for ops/conv.h (which runs convolutions as im2col + GEMM).
#pragma once

#include <cstdint>

namespace qs::kernels::ref {

struct Conv2dShape {
  int64_t n, c_in, h, w;  // input [n, c_in, h, w]
  int64_t c_out, kh, kw;  // weight [c_out, c_in, kh, kw] (nn.Conv2d, groups = 1)
  int64_t stride = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;  // zero padding
  int64_t out_h() const { return (h + pad_top + pad_bottom - kh) / stride + 1; }
  int64_t out_w() const { return (w + pad_left + pad_right - kw) / stride + 1; }
};

// y: [n, c_out, out_h, out_w] = conv(x, weight) + bias (bias [c_out] or null).
void conv2d(const float* x, const Conv2dShape& s, const float* weight, const float* bias, float* y);

// y: [n, c, 2h, 2w], y[.., i, j] = x[.., i / 2, j / 2] (F.interpolate(scale_factor=2.0,
// mode="nearest")).
void upsample_nearest2x(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, float* y);

}  // namespace qs::kernels::ref
