// vision: torchvision's BICUBIC resize of a uint8 image on the CPU (tvF.resize with
// antialias, which transformers' video processors call on uint8 frames), reproduced to the
// byte. It differs from Pillow's (pil_resize.h) by one level in about 0.5% of pixels: torch's
// uint8 kernel (after Pillow-SIMD) rounds the weights to int16 at a precision chosen from the
// largest weight, where Pillow uses 22 fixed bits, and always runs the horizontal pass first.
#pragma once

#include <cstdint>
#include <vector>

namespace qs::vision {

// `src` is [height, width, channels] row-major; returns [out_height, out_width, channels].
// All sizes must be positive.
std::vector<uint8_t> torch_resize_bicubic(const std::vector<uint8_t>& src, int64_t width,
                                          int64_t height, int channels, int64_t out_width,
                                          int64_t out_height);

}  // namespace qs::vision
