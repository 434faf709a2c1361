// vision: JPEG through libjpeg-turbo, as Pillow's JpegDecode.c drives it (the accurate integer
// IDCT, fancy upsampling: libjpeg's defaults), so the RGB is Pillow's to the level.
// jpeglib.h uses size_t and FILE without including their headers.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>  // after jpeglib.h, whose types it uses
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>

#include "vision/image_decoders.h"

namespace qs::vision {
namespace {

// libjpeg reports fatal errors through error_exit, which must not return: it longjmps back to
// decode_jpeg_into. Warnings are counted, never printed: a truncated stream is libjpeg's
// JWRN_JPEG_EOF warning (it pads the image with grey), which Pillow refuses ("image file is
// truncated") and so do we.
struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_note(j_common_ptr cinfo, int msg_level) {
  auto* err = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (msg_level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) err->truncated = true;
  if (msg_level < 0) cinfo->err->num_warnings++;
}

struct JpegJob {
  std::string_view bytes;
  int64_t max_pixels = 0;
  const std::string* name = nullptr;
  DecodedImage* out = nullptr;
  std::vector<uint8_t>* cmyk = nullptr;  // the 4-component rows before conversion
  Status status;
};

// Pillow reads a 4-component JPEG as CMYK with inverted samples ("CMYK;I", "assume adobe
// conventions", whatever the Adobe marker says) and converts it with Convert.c's cmyk2rgb.
void cmyk_to_rgb(const std::vector<uint8_t>& cmyk, std::vector<uint8_t>& rgb) {
  const size_t n = cmyk.size() / 4;
  for (size_t i = 0; i < n; ++i) {
    const int nk = cmyk[4 * i + 3];  // 255 - k after the inversion
    for (int c = 0; c < 3; ++c) {
      const int v = 255 - cmyk[4 * i + c];
      const int t = v * nk + 128;
      const int muldiv255 = ((t >> 8) + t) >> 8;
      rgb[3 * i + c] = static_cast<uint8_t>(std::clamp(nk - muldiv255, 0, 255));
    }
  }
}

// Everything between setjmp and the last libjpeg call lives here, with no C++ object created
// after setjmp, so a longjmp skips no destructor.
void decode_jpeg_into(JpegJob* job, jpeg_decompress_struct* cinfo, JpegErrors* err) {
  if (setjmp(err->jump)) {
    job->status = data_loss(*job->name + ": not a readable JPEG: " + err->message);
    return;
  }
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(job->bytes.data()),
               static_cast<unsigned long>(job->bytes.size()));
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(cinfo, TRUE);
  job->status =
      check_image_size(cinfo->image_width, cinfo->image_height, job->max_pixels, *job->name);
  if (!job->status.ok()) return;
  const bool four = cinfo->num_components == 4;
  if (four) {
    cinfo->out_color_space = JCS_CMYK;
  } else if (cinfo->num_components == 1 || cinfo->num_components == 3) {
    cinfo->out_color_space = JCS_RGB;  // a grey image repeated into three channels, as Pillow
  } else {
    job->status = unimplemented(*job->name + ": a JPEG with " +
                                std::to_string(cinfo->num_components) + " components");
    return;
  }
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m != nullptr; m = m->next) {
    // Pillow keeps the first APP1 that is EXIF (JpegImagePlugin's APP handler).
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 &&
        std::memcmp(m->data, "Exif\0\0", 6) == 0 && job->out->exif.empty()) {
      job->out->exif.assign(reinterpret_cast<const char*>(m->data), m->data_length);
    }
  }
  jpeg_start_decompress(cinfo);
  const size_t width = cinfo->output_width;
  const size_t row_bytes = width * static_cast<size_t>(cinfo->output_components);
  std::vector<uint8_t>& target = four ? *job->cmyk : job->out->pixels;
  target.resize(row_bytes * cinfo->output_height);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = target.data() + row_bytes * cinfo->output_scanline;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  if (err->truncated) {
    job->status =
        data_loss(*job->name + ": the JPEG is truncated (its data ends before the image)");
    return;
  }
  job->out->width = cinfo->output_width;
  job->out->height = cinfo->output_height;
  job->out->channels = 3;
  if (four) {
    job->out->pixels.resize(width * cinfo->output_height * 3);
    cmyk_to_rgb(*job->cmyk, job->out->pixels);
  }
}

}  // namespace

Result<DecodedImage> decode_jpeg(std::string_view bytes, const std::string& name,
                                 int64_t max_pixels) {
  DecodedImage out;
  std::vector<uint8_t> cmyk;
  JpegJob job;
  job.bytes = bytes;
  job.max_pixels = max_pixels;
  job.name = &name;
  job.out = &out;
  job.cmyk = &cmyk;
  jpeg_decompress_struct cinfo{};
  JpegErrors err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_note;
  decode_jpeg_into(&job, &cinfo, &err);
  jpeg_destroy_decompress(&cinfo);
  if (!job.status.ok()) return job.status;
  return out;
}

}  // namespace qs::vision
