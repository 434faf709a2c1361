#include "vision/vae_image_input.h"

#include <string>

#include "vision/pil_resize.h"

namespace qs::vision {

Result<std::vector<float>> vae_image_input(const RgbImage& image, int64_t width, int64_t height) {
  if (width <= 0 || height <= 0 || image.width <= 0 || image.height <= 0 ||
      static_cast<int64_t>(image.pixels.size()) != image.width * image.height * 3) {
    return invalid_argument("cannot prepare a " + std::to_string(image.width) + "x" +
                            std::to_string(image.height) + " image for a " + std::to_string(width) +
                            "x" + std::to_string(height) + " video");
  }
  const std::vector<uint8_t> px =
      pil_resize(image.pixels, image.width, image.height, 3, width, height, PilFilter::kLanczos);
  const int64_t plane = width * height;
  std::vector<float> out(static_cast<size_t>(3 * plane));
  for (int64_t p = 0; p < plane; ++p) {
    for (int64_t c = 0; c < 3; ++c) {
      // pil_to_numpy's astype(float32) / 255, then normalize's 2 x - 1, both in f32.
      const float v = static_cast<float>(px[static_cast<size_t>(p * 3 + c)]) / 255.0f;
      out[static_cast<size_t>(c * plane + p)] = 2.0f * v - 1.0f;
    }
  }
  return out;
}

}  // namespace qs::vision
