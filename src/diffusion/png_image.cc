// diffusion: PNG through libpng's simplified API (png_image_*), see png_image.h.
#include "diffusion/png_image.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace qs::diffusion {

std::vector<uint8_t> to_rgb8(const std::vector<float>& rgb) {
  std::vector<uint8_t> out(rgb.size());
  for (size_t i = 0; i < rgb.size(); ++i) {
    const float v = std::clamp(rgb[i], 0.0f, 1.0f) * 255.0f;
    out[i] = static_cast<uint8_t>(std::nearbyint(v));  // numpy round: half to even
  }
  return out;
}

Result<std::string> encode_png(int64_t width, int64_t height, const std::vector<uint8_t>& rgb8) {
  if (width <= 0 || height <= 0 || rgb8.size() != static_cast<size_t>(width * height * 3)) {
    return invalid_argument("encode_png: pixel buffer does not match " + std::to_string(width) +
                            "x" + std::to_string(height));
  }
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(width);
  img.height = static_cast<png_uint_32>(height);
  img.format = PNG_FORMAT_RGB;
  // libpng's two-call protocol: a null buffer asks for the size, the second call writes.
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&img, nullptr, &size, 0, rgb8.data(), 0, nullptr)) {
    return Status(StatusCode::kInternal, std::string("encode_png: ") + img.message);
  }
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&img, out.data(), &size, 0, rgb8.data(), 0, nullptr)) {
    return Status(StatusCode::kInternal, std::string("encode_png: ") + img.message);
  }
  out.resize(size);
  return out;
}

Status write_png(const std::string& path, int64_t width, int64_t height,
                 const std::vector<uint8_t>& rgb8) {
  QS_ASSIGN_OR_RETURN(std::string bytes, encode_png(width, height, rgb8));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();  // a full disk may only show when the buffer is flushed
    if (out.fail()) {
      std::remove(tmp.c_str());
      return Status(StatusCode::kIo, path + ": cannot write " + tmp);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return Status(StatusCode::kIo, path + ": " + ec.message());
  }
  return ok_status();
}

namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// libpng allocates a chunk's declared length before reading it (Debian's build sets no chunk
// limit), so a 43-byte file whose tEXt chunk claims 1.7 GB made it allocate 1.7 GB. The chunk
// list is walked here first: every chunk must fit in the file.
Status check_chunks(const std::string& path, const std::vector<uint8_t>& b) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.size() < 8 || std::memcmp(b.data(), kSignature, 8) != 0) {
    return invalid_argument(path + ": not a PNG file (no PNG signature)");
  }
  size_t pos = 8;
  while (pos + 12 <= b.size()) {
    const uint32_t len = be32(b.data() + pos);
    const std::string type(reinterpret_cast<const char*>(b.data() + pos + 4), 4);
    if (len > b.size() - pos - 12) {
      return data_loss(path + ": chunk '" + type + "' at byte " + std::to_string(pos) + " claims " +
                       std::to_string(len) + " bytes, past the end of the file");
    }
    pos += 12 + len;
    if (type == "IEND") return ok_status();
  }
  return data_loss(path + ": truncated (no IEND chunk)");
}

}  // namespace

Status read_png(const std::string& path, int64_t* width, int64_t* height,
                std::vector<uint8_t>* rgb8) {
  std::vector<uint8_t> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status(StatusCode::kIo, path + ": cannot open");
    in.seekg(0, std::ios::end);
    const auto size = static_cast<int64_t>(in.tellg());
    // Far above any image this pipeline reads (64 megapixels of RGB compress to much less).
    if (size < 0 || size > (int64_t{1} << 30)) {
      return invalid_argument(path + ": larger than 1 GiB");
    }
    bytes.resize(static_cast<size_t>(size));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(bytes.data()), size);
    if (!in) return Status(StatusCode::kIo, path + ": read failed");
  }
  QS_RETURN_IF_ERROR(check_chunks(path, bytes));
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, bytes.data(), bytes.size())) {
    return Status(StatusCode::kIo, path + ": " + img.message);
  }
  // The header alone sets the buffer size: bound it (a 30-byte file may claim 2^31 x 2^31).
  constexpr uint64_t kMaxSide = 16384, kMaxPixels = uint64_t{1} << 26;
  if (img.width == 0 || img.height == 0 || img.width > kMaxSide || img.height > kMaxSide ||
      uint64_t{img.width} * img.height > kMaxPixels) {
    const std::string size = std::to_string(img.width) + "x" + std::to_string(img.height);
    png_image_free(&img);
    return invalid_argument(path + ": image size " + size +
                            " out of range (at most 16384 a side and 64 megapixels)");
  }
  img.format = PNG_FORMAT_RGB;
  rgb8->resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, rgb8->data(), 0, nullptr)) {
    const std::string msg = img.message;
    png_image_free(&img);
    return data_loss(path + ": " + msg);
  }
  *width = img.width;
  *height = img.height;
  return ok_status();
}

}  // namespace qs::diffusion
