// ops: 3-D convolution over NCTHW f32 videos (nn.Conv3d, groups 1), as im2col + the f32 GEMM of
// ops/gemm.h. The output positions are cut into bands that the pool's threads take one at a
// time, each unfolding its band into a column buffer of its own (a few MB, whatever the frame
// size) and multiplying it on its own thread, so a 480x832 frame never needs the 27x column
// matrix whole. A 1x1x1 convolution skips the unfolding. The scalar oracle is
// kernels/ref/conv_ref.h.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/ref/conv_ref.h"

namespace qs::ops {

using Conv3dShape = kernels::ref::Conv3dShape;

// y [n, c_out, out_t, out_h, out_w] = conv(x [n, c_in, t, h, w], weight [c_out, c_in, kt, kh,
// kw]) + bias [c_out] (or null). y may not alias x. Fails on non-positive sizes or strides,
// negative padding, or an empty output.
Status conv3d(const float* x, const Conv3dShape& s, const float* weight, const float* bias,
              float* y, ThreadPool& pool);

// The floats each thread running conv3d(s) holds beyond x, y and the weight, for memory
// planners: its column buffer (none for a 1x1x1 convolution), freed when the call returns, and
// the GEMM's packing of one band (gemm_hwy.cc's B panel of 256 rows and A block of 192 x 256),
// which ops::gemm keeps per thread for later calls.
struct Conv3dScratch {
  int64_t column_floats = 0;
  int64_t packing_floats = 0;
};
Conv3dScratch conv3d_scratch(const Conv3dShape& s, int threads);

}  // namespace qs::ops
