// vision: reading image files (see image_file.h): the format from the magic bytes, the
// decoder, then EXIF orientation and alpha as Pillow and transformers treat them.
#include "vision/image_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include "vision/exif_orientation.h"
#include "vision/image_decoders.h"

namespace qs::vision {
namespace {

using namespace std::string_view_literals;  // magic bytes hold NULs

bool starts_with(std::string_view bytes, std::string_view magic, size_t at = 0) {
  return bytes.size() >= at + magic.size() && bytes.substr(at, magic.size()) == magic;
}

// Formats we recognise but do not read: said by name rather than "not an image".
const char* unsupported_format(std::string_view bytes) {
  if (starts_with(bytes, "GIF87a") || starts_with(bytes, "GIF89a")) return "GIF";
  if (starts_with(bytes, "BM")) return "BMP";
  if (starts_with(bytes, "II*\0"sv) || starts_with(bytes, "MM\0*"sv)) return "TIFF";
  if (starts_with(bytes, "ftypavif", 4) || starts_with(bytes, "ftypavis", 4)) return "AVIF";
  if (starts_with(bytes, "ftyphei", 4) || starts_with(bytes, "ftypmif1", 4)) return "HEIF";
  return nullptr;
}

// Pillow's alpha_composite of the image over an opaque white one (AlphaComposite.c, integer
// arithmetic with 7 extra bits), which transformers' convert_to_rgb does to any image with
// alpha; the result is opaque, so only its colour is kept.
void over_white(const std::vector<uint8_t>& rgba, std::vector<uint8_t>& rgb) {
  constexpr uint32_t kBits = 7;
  const auto div255 = [](uint32_t v) { return ((v >> 8) + v) >> 8; };
  const size_t n = rgba.size() / 4;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = rgba[4 * i + 3];
    if (a == 0) {
      std::memset(&rgb[3 * i], 255, 3);
      continue;
    }
    const uint32_t blend = 255 * (255 - a);
    const uint32_t out_a255 = a * 255 + blend;
    const uint32_t coef1 = a * 255 * 255 * (1u << kBits) / out_a255;
    const uint32_t coef2 = 255 * (1u << kBits) - coef1;
    for (int c = 0; c < 3; ++c) {
      const uint32_t t = rgba[4 * i + c] * coef1 + 255 * coef2;
      rgb[3 * i + c] = static_cast<uint8_t>(div255(t + (0x80u << kBits)) >> kBits);
    }
  }
}

Result<ImageFormat> sniff_format(std::string_view bytes, const std::string& name) {
  if (starts_with(bytes, "\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  if (starts_with(bytes, "RIFF") && starts_with(bytes, "WEBP", 8)) return ImageFormat::kWebp;
  if (const char* other = unsupported_format(bytes)) {
    return unimplemented(name + ": " + other + " images are not read (JPEG, PNG and WebP are)");
  }
  return invalid_argument(name + ": not an image (neither JPEG, PNG nor WebP)");
}

Result<DecodedImage> decode(ImageFormat format, std::string_view bytes, const std::string& name,
                            int64_t max_pixels) {
  switch (format) {
    case ImageFormat::kJpeg:
      return decode_jpeg(bytes, name, max_pixels);
    case ImageFormat::kPng:
      return decode_png(bytes, name, max_pixels);
    case ImageFormat::kWebp:
      return decode_webp(bytes, name, max_pixels);
  }
  return internal_error(name + ": unknown image format");
}

}  // namespace

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kWebp:
      return "WebP";
  }
  return "?";
}

Status check_image_size(int64_t width, int64_t height, int64_t max_pixels,
                        const std::string& name) {
  if (width <= 0 || height <= 0) {
    return data_loss(name + ": the image is " + std::to_string(width) + "x" +
                     std::to_string(height) + " pixels");
  }
  if (width > max_pixels / height) {
    return out_of_range(name + ": the image is " + std::to_string(width) + "x" +
                        std::to_string(height) + " pixels, more than the limit of " +
                        std::to_string(max_pixels));
  }
  return ok_status();
}

Result<RgbImage> read_image_bytes(std::string_view bytes, const std::string& name,
                                  const ImageReadOptions& options) {
  if (options.max_pixels <= 0) {
    return invalid_argument(name + ": max_pixels must be positive, not " +
                            std::to_string(options.max_pixels));
  }
  if (bytes.empty()) return invalid_argument(name + ": the image is empty (0 bytes)");
  RgbImage image;
  QS_ASSIGN_OR_RETURN(image.format, sniff_format(bytes, name));
  QS_ASSIGN_OR_RETURN(DecodedImage d, decode(image.format, bytes, name, options.max_pixels));
  image.exif_orientation = d.exif.empty() ? 1 : exif_orientation(d.exif);
  if (options.apply_exif_orientation) {
    apply_orientation(image.exif_orientation, d.channels, d.width, d.height, d.pixels);
  }
  image.width = d.width;
  image.height = d.height;
  if (d.channels == 3) {
    image.pixels = std::move(d.pixels);
    return image;
  }
  image.pixels.resize(static_cast<size_t>(d.width * d.height) * 3);
  if (options.alpha == AlphaMode::kOverWhite) {
    over_white(d.pixels, image.pixels);
  } else {
    const size_t n = image.pixels.size() / 3;
    for (size_t i = 0; i < n; ++i) std::memcpy(&image.pixels[3 * i], &d.pixels[4 * i], 3);
  }
  return image;
}

Result<RgbImage> read_image_file(const std::string& path, const ImageReadOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return not_found(path + ": no such image file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open");
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  if (in.bad()) return io_error(path + ": read error");
  return read_image_bytes(bytes, path, options);
}

}  // namespace qs::vision
