// vision: EXIF orientation (see exif_orientation.h). The EXIF block comes from the file, so
// every offset is checked against its size.
#include "vision/exif_orientation.h"

#include <cstring>

namespace qs::vision {
namespace {

struct TiffReader {
  std::string_view data;
  bool little_endian = true;

  bool fits(size_t offset, size_t n) const {
    return offset <= data.size() && n <= data.size() - offset;
  }
  uint32_t read(size_t offset, int n) const {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t byte = static_cast<uint8_t>(data[offset + (little_endian ? n - 1 - i : i)]);
      v = (v << 8) | byte;
    }
    return v;
  }
};

}  // namespace

int exif_orientation(std::string_view exif) {
  if (exif.size() >= 6 && std::memcmp(exif.data(), "Exif\0\0", 6) == 0) exif.remove_prefix(6);
  TiffReader tiff{exif};
  if (!tiff.fits(0, 8)) return 1;
  if (exif.substr(0, 2) == "MM") {
    tiff.little_endian = false;
  } else if (exif.substr(0, 2) != "II") {
    return 1;
  }
  if (tiff.read(2, 2) != 42) return 1;
  const size_t ifd = tiff.read(4, 4);
  if (!tiff.fits(ifd, 2)) return 1;
  const uint32_t n_entries = tiff.read(ifd, 2);
  for (uint32_t i = 0; i < n_entries; ++i) {
    const size_t entry = ifd + 2 + 12 * static_cast<size_t>(i);
    if (!tiff.fits(entry, 12)) return 1;
    if (tiff.read(entry, 2) != 0x0112) continue;
    const uint32_t type = tiff.read(entry + 2, 2);
    const uint32_t count = tiff.read(entry + 4, 4);
    if (count < 1) return 1;
    uint32_t value = 0;
    if (type == 3) {  // SHORT, the type the standard gives the tag
      value = tiff.read(entry + 8, 2);
    } else if (type == 4) {  // LONG, which Pillow reads just as well
      value = tiff.read(entry + 8, 4);
    } else {
      return 1;
    }
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

void apply_orientation(int orientation, int channels, int64_t& width, int64_t& height,
                       std::vector<uint8_t>& pixels) {
  if (orientation < 2 || orientation > 8) return;
  const int64_t w = width, h = height;
  const bool swap = orientation >= 5;
  const int64_t out_w = swap ? h : w;
  const int64_t out_h = swap ? w : h;
  std::vector<uint8_t> out(pixels.size());
  for (int64_t y = 0; y < out_h; ++y) {
    for (int64_t x = 0; x < out_w; ++x) {
      int64_t sx = x, sy = y;  // the source pixel of output (x, y)
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;  // mirrored
        case 3:
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;  // 180 degrees
        case 4:
          sy = h - 1 - y;
          break;  // flipped
        case 5:
          sx = y;
          sy = x;
          break;  // transposed
        case 6:
          sx = y;
          sy = h - 1 - x;
          break;  // 90 degrees clockwise
        case 7:
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;  // transversed
        case 8:
          sx = w - 1 - y;
          sy = x;
          break;  // 90 degrees counter-clockwise
      }
      std::memcpy(&out[(y * out_w + x) * channels], &pixels[(sy * w + sx) * channels], channels);
    }
  }
  pixels = std::move(out);
  width = out_w;
  height = out_h;
}

}  // namespace qs::vision
