// ops: 2-D convolution (as im2col + the f32 GEMM of ops/gemm.h, in bands of output rows so
// the column buffer stays small at megapixel sizes) and nearest 2x upsampling, NCHW f32.
// The scalar oracles are kernels/ref/conv_ref.h.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/ref/conv_ref.h"

namespace qs::ops {

using Conv2dShape = kernels::ref::Conv2dShape;

// y [n, c_out, out_h, out_w] = conv(x [n, c_in, h, w], weight [c_out, c_in, kh, kw]) + bias.
// Fails on non-positive sizes or an empty output.
Status conv2d(const float* x, const Conv2dShape& s, const float* weight, const float* bias,
              float* y, ThreadPool& pool);

void upsample_nearest2x(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, float* y);

}  // namespace qs::ops
