// vision: PNG through libpng, every colour type and depth turned into the 8-bit RGB or RGBA
// that Pillow's PngImagePlugin and convert() make of it.
#include <png.h>

#include <csetjmp>
#include <cstring>

#include "vision/image_decoders.h"

namespace qs::vision {
namespace {

struct PngJob {
  std::string_view bytes;
  size_t offset = 0;
  int64_t max_pixels = 0;
  const std::string* name = nullptr;
  DecodedImage* out = nullptr;
  std::vector<png_bytep>* rows = nullptr;
  bool grey16 = false;     // 16-bit grey, read as 16 bits and clipped after
  char message[256] = {};  // libpng's reason for the last error
  Status status;
};

void png_fail(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::strncpy(job->message, message, sizeof(job->message) - 1);
  png_longjmp(png, 1);
}

// libpng's warnings (a known-incorrect sRGB profile, a bad ancillary CRC) would go to stderr;
// Pillow reads such files, and so do we, quietly.
void png_quiet(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep data, size_t length) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (length > job->bytes.size() - job->offset) {
    png_error(png, "the file ends before the image does (truncated)");
  }
  std::memcpy(data, job->bytes.data() + job->offset, length);
  job->offset += length;
}

// The transforms that give Pillow's pixels: palette entries looked up, a tRNS chunk as an
// alpha channel (Pillow's "transparency", which convert("RGBA") turns into alpha), 1/2/4-bit
// grey scaled to 8 bits by bit replication (Pillow's L;1/L;2/L;4 unpackers), grey repeated
// into RGB. 16-bit samples keep their high byte, as Pillow's RGB;16B/RGBA;16B/LA;16B
// unpackers do; 16-bit grey alone becomes Pillow's I;16, whose conversion to RGB clips at 255
// (Convert.c's I16_RGB) rather than scaling, so it is read whole and clipped below.
void png_setup_transforms(png_structp png, png_infop info, PngJob* job) {
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  job->grey16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (!job->grey16 && png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (depth == 16 && !job->grey16) png_set_strip_16(png);
  if (!job->grey16 && (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)) {
    png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

void decode_png_into(PngJob* job, png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) {
    job->status = data_loss(*job->name + ": not a readable PNG: " + job->message);
    return;
  }
  png_set_read_fn(png, job, png_read_bytes);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info);
  const png_uint_32 height = png_get_image_height(png, info);
  job->status = check_image_size(width, height, job->max_pixels, *job->name);
  if (!job->status.ok()) return;
  png_setup_transforms(png, info, job);
  const size_t row_bytes = png_get_rowbytes(png, info);
  const int channels = png_get_channels(png, info);
  std::vector<uint8_t>& pixels = job->out->pixels;
  pixels.resize(row_bytes * height);
  job->rows->resize(height);
  for (png_uint_32 y = 0; y < height; ++y) (*job->rows)[y] = pixels.data() + row_bytes * y;
  png_read_image(png, job->rows->data());
  job->out->width = width;
  job->out->height = height;
  job->out->channels = job->grey16 ? 3 : channels;
  job->status = ok_status();
  // Chunks after the image may still hold eXIf, which Pillow reads when it loads the image;
  // a file cut after its last IDAT is still an image to Pillow, so a failure here is ignored.
  if (setjmp(png_jmpbuf(png))) return;
  png_read_end(png, info);
}

void grey16_to_rgb(DecodedImage& image) {
  const size_t n = static_cast<size_t>(image.width * image.height);
  std::vector<uint8_t> rgb(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t hi = image.pixels[2 * i], lo = image.pixels[2 * i + 1];
    std::memset(&rgb[3 * i], hi == 0 ? lo : 255, 3);
  }
  image.pixels = std::move(rgb);
}

}  // namespace

Result<DecodedImage> decode_png(std::string_view bytes, const std::string& name,
                                int64_t max_pixels) {
  DecodedImage out;
  std::vector<png_bytep> rows;
  PngJob job;
  job.bytes = bytes;
  job.max_pixels = max_pixels;
  job.name = &name;
  job.out = &out;
  job.rows = &rows;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, png_fail, png_quiet);
  if (png == nullptr) return internal_error(name + ": libpng could not start");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return internal_error(name + ": libpng could not start");
  }
  decode_png_into(&job, png, info);
  if (job.status.ok() && out.pixels.empty()) job.status = data_loss(name + ": no image data");
  if (job.status.ok()) {
    png_bytep exif = nullptr;
    png_uint_32 n_exif = 0;
    if (png_get_eXIf_1(png, info, &n_exif, &exif) != 0 && exif != nullptr) {
      out.exif.assign(reinterpret_cast<const char*>(exif), n_exif);
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  if (!job.status.ok()) return job.status;
  if (job.grey16) grey16_to_rgb(out);
  return out;
}

}  // namespace qs::vision
