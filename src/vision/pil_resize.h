// vision: Pillow's resampling of 8-bit images (libImaging/Resample.c), written anew to give
// the same bytes: a separable convolution in two passes, each rounded and clipped to uint8, with
// the filter widened by the scale when shrinking (antialiasing) and its weights in 22-bit fixed
// point. Bicubic (a = -0.5) is what Qwen2-VL's processor asks for; Lanczos (3 lobes) what
// diffusers' VaeImageProcessor resizes with (a Wan I2V pipeline's input image).
#pragma once

#include <cstdint>
#include <vector>

namespace qs::vision {

enum class PilFilter { kBicubic, kLanczos };

// Image.resize((out_width, out_height), filter) of `pixels` ([height, width, channels] uint8,
// no alpha: Pillow premultiplies RGBA first, which this does not do). Sizes positive.
std::vector<uint8_t> pil_resize(const std::vector<uint8_t>& pixels, int64_t width, int64_t height,
                                int channels, int64_t out_width, int64_t out_height,
                                PilFilter filter);

// Image.resize((out_width, out_height), Image.BICUBIC) of `pixels` ([height, width, channels]
// uint8, no alpha: Pillow premultiplies RGBA first, which this does not do). Sizes positive.
std::vector<uint8_t> pil_resize_bicubic(const std::vector<uint8_t>& pixels, int64_t width,
                                        int64_t height, int channels, int64_t out_width,
                                        int64_t out_height);

}  // namespace qs::vision
