// kernels/ref: scalar activations of the image pipeline's models, in place over n floats.
// The formulas are PyTorch's: nn.GELU() (erf), nn.GELU(approximate="tanh") (FLUX's
// feed-forwards, T5's gelu_new), CLIP's quick_gelu x * sigmoid(1.702 x), SiLU and ReLU.
#pragma once

#include <cstdint>

namespace qs::kernels::ref {

void gelu_erf(float* x, int64_t n);
void gelu_tanh(float* x, int64_t n);
void quick_gelu(float* x, int64_t n);
void silu(float* x, int64_t n);
void relu(float* x, int64_t n);

}  // namespace qs::kernels::ref
