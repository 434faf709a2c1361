// vision: image files in, as 8-bit RGB the way Pillow hands them to transformers' image
// processors. JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp) are read from a path or
// from the bytes of an upload or a data: URL; the size is checked from the header before any
// pixel is decoded, so a hostile 30000x30000 header costs nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs::vision {

// Pillow's Image.MAX_IMAGE_PIXELS: it warns of a decompression bomb past this many pixels
// (and refuses twice as many); we refuse past it.
inline constexpr int64_t kDefaultMaxPixels = 89478485;

// What becomes of an alpha channel (PNG RGBA/LA, a tRNS colour, WebP with alpha).
enum class AlphaMode {
  // Composited over opaque white with Pillow's alpha_composite arithmetic: what
  // transformers' image processors do to an image that still has alpha (convert_to_rgb).
  kOverWhite,
  // Dropped, the colour kept as stored: Pillow's convert("RGB"), which transformers'
  // load_image (paths, URLs, base64) applies before the processor sees the image.
  kDrop,
};

struct ImageReadOptions {
  int64_t max_pixels = kDefaultMaxPixels;  // width * height from the header, refused above
  AlphaMode alpha = AlphaMode::kOverWhite;
  // EXIF orientation (tags 2 to 8) applied as Pillow's ImageOps.exif_transpose, which
  // transformers' load_image runs; an image handed to a processor as a PIL image is not.
  bool apply_exif_orientation = true;
};

enum class ImageFormat { kJpeg, kPng, kWebp };

const char* image_format_name(ImageFormat format);

struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // [height, width, 3] row-major RGB
  ImageFormat format = ImageFormat::kPng;
  int exif_orientation = 1;  // as stored (1 to 8; 1 when absent or unreadable)
};

// `name` names the bytes in messages (an upload's file name, "data: URL").
Result<RgbImage> read_image_file(const std::string& path, const ImageReadOptions& options = {});
Result<RgbImage> read_image_bytes(std::string_view bytes, const std::string& name,
                                  const ImageReadOptions& options = {});

}  // namespace qs::vision
