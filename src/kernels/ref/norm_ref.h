// kernels/ref: the normalizations of the image pipeline's models. LayerNorm over rows (CLIP,
// FLUX's affine-free AdaLN norms) and GroupNorm over NCHW images (the VAE); statistics in
// double, biased variance, as PyTorch's (which accumulates in higher precision too).
#pragma once

#include <cstdint>

namespace qs::kernels::ref {

// y[i, :] = (x[i, :] - mean) / sqrt(var + eps) * weight + bias, for m rows of d; weight and
// bias may be null (elementwise_affine=False). y may alias x.
void layer_norm(const float* x, int64_t m, int64_t d, const float* weight, const float* bias,
                float eps, float* y);

// x, y: [n, c, hw]; channels split into `groups` consecutive groups, each normalized over
// its (c / groups) * hw values, then y = xhat * weight[c] + bias[c]. y may alias x.
void group_norm(const float* x, int64_t n, int64_t c, int64_t hw, int64_t groups,
                const float* weight, const float* bias, float eps, float* y);

}  // namespace qs::kernels::ref
