// vision: an image prepared as diffusers' VaeImageProcessor.preprocess prepares the first frame
// of an image-to-video request (Wan's VideoProcessor): resized to the video's size with Pillow's
// Lanczos (resize_mode "default": stretched, no crop), scaled to [0, 1] in f32, then to [-1, 1],
// channels first.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "vision/image_file.h"

namespace qs::vision {

// [3, height, width] in [-1, 1]. Sizes must be positive.
Result<std::vector<float>> vae_image_input(const RgbImage& image, int64_t width, int64_t height);

}  // namespace qs::vision
