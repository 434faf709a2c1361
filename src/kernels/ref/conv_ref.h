// kernels/ref: 2-D convolution and nearest-neighbour 2x upsampling over NCHW f32 images and 3-D
// convolution over NCTHW f32 videos, the scalar oracles for ops/conv.h and ops/conv3d.h (which
// run convolutions as im2col + GEMM).
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

// nn.Conv3d (groups = 1, dilation 1) with zero padding given per side of each axis, so that
// a caller can pad asymmetrically: WanCausalConv3d pads time (2 * pad, 0), Wan's 2-D
// downsample pads space (0, 1, 0, 1).
struct Conv3dShape {
  int64_t n, c_in, t, h, w;   // input [n, c_in, t, h, w]
  int64_t c_out, kt, kh, kw;  // weight [c_out, c_in, kt, kh, kw]
  int64_t stride_t = 1, stride_h = 1, stride_w = 1;
  int64_t pad_front = 0, pad_back = 0;  // time
  int64_t pad_top = 0, pad_bottom = 0;  // height
  int64_t pad_left = 0, pad_right = 0;  // width
  int64_t out_t() const { return (t + pad_front + pad_back - kt) / stride_t + 1; }
  int64_t out_h() const { return (h + pad_top + pad_bottom - kh) / stride_h + 1; }
  int64_t out_w() const { return (w + pad_left + pad_right - kw) / stride_w + 1; }
};

// y: [n, c_out, out_t, out_h, out_w] = conv(x, weight) + bias (bias [c_out] or null).
void conv3d(const float* x, const Conv3dShape& s, const float* weight, const float* bias, float* y);

// y: [n, c, 2h, 2w], y[.., i, j] = x[.., i / 2, j / 2] (F.interpolate(scale_factor=2.0,
// mode="nearest")).
void upsample_nearest2x(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, float* y);

}  // namespace qs::kernels::ref
