// vision: the EXIF Orientation tag (0x0112) read from an EXIF block, and the eight
// orientations applied to pixels as Pillow's ImageOps.exif_transpose applies them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace qs::vision {

// 1 to 8 from the first IFD of `exif` (a TIFF stream, with or without the "Exif\0\0" that
// JPEG's APP1 puts first); 1 when absent, unreadable or out of range, as Pillow treats them.
int exif_orientation(std::string_view exif);

// Turns `pixels` ([height, width, channels]) upright for `orientation`; width and height
// swap for 5 to 8. Pillow's methods: 2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM,
// 5 TRANSPOSE, 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90 (rotations counter-clockwise).
void apply_orientation(int orientation, int channels, int64_t& width, int64_t& height,
                       std::vector<uint8_t>& pixels);

}  // namespace qs::vision
