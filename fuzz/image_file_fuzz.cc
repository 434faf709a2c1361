// fuzz: an uploaded image's bytes as vision::read_image_bytes reads them (libjpeg-turbo,
// libpng or libwebp by magic bytes, the header's size checked first, EXIF orientation, alpha
// over white), then Qwen2-VL's image processor on what decoded. What is accepted must be a
// whole RGB image within the pixel limit, and its patches the grid's count, all finite. The
// image libraries are Debian's and not instrumented, so coverage guides through our side only.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "vision/image_file.h"
#include "vision/qwen2_vl_image_processor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A small limit keeps each run short: a PNG of one colour packs megapixels into a few bytes.
  constexpr int64_t kMaxPixels = 1 << 20;
  auto image =
      qs::vision::read_image_bytes(std::string_view(reinterpret_cast<const char*>(data), size),
                                   "upload", {.max_pixels = kMaxPixels});
  if (!image.ok()) return 0;
  QS_CHECK(image->width > 0 && image->height > 0 && image->width * image->height <= kMaxPixels);
  QS_CHECK(static_cast<int64_t>(image->pixels.size()) == image->width * image->height * 3);
  QS_CHECK(image->exif_orientation >= 1 && image->exif_orientation <= 8);
  qs::vision::Qwen2VLImageConfig config;
  config.max_pixels = 28 * 28 * 16;
  auto patches = qs::vision::qwen2_vl_preprocess(*image, config);
  if (!patches.ok()) return 0;  // an aspect ratio past 200
  QS_CHECK(patches->n_patches == patches->grid_thw[1] * patches->grid_thw[2]);
  QS_CHECK(patches->n_patches * patches->patch_dim ==
           static_cast<int64_t>(patches->pixel_values.size()));
  // Multiples of the merge group; the area may pass max_pixels, as transformers' smart_resize
  // lets it when a very thin image is held at one group's width (its max(factor, ...)).
  QS_CHECK(patches->resized.height % 28 == 0 && patches->resized.width % 28 == 0);
  for (float v : patches->pixel_values) QS_CHECK(std::isfinite(v));
  return 0;
}
