// vision: the per-format decoders behind image_file.h, each one library's (libjpeg-turbo,
// libpng, libwebp) call sequence with its error handling turned into a Status. Internal to
// the room: callers read images through read_image_bytes().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs::vision {

// A decoded image before alpha and orientation are dealt with.
struct DecodedImage {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 3;             // 3: RGB; 4: RGBA, not premultiplied
  std::vector<uint8_t> pixels;  // [height, width, channels]
  std::string exif;             // the EXIF block as stored (may start "Exif\0\0"), or empty
};

// The size check every decoder makes from the header, before it allocates pixels.
Status check_image_size(int64_t width, int64_t height, int64_t max_pixels, const std::string& name);

Result<DecodedImage> decode_jpeg(std::string_view bytes, const std::string& name,
                                 int64_t max_pixels);
Result<DecodedImage> decode_png(std::string_view bytes, const std::string& name,
                                int64_t max_pixels);
Result<DecodedImage> decode_webp(std::string_view bytes, const std::string& name,
                                 int64_t max_pixels);

}  // namespace qs::vision
