// vision: WebP through libwebp's animation decoder, the one Pillow's _webp.c uses for every
// WebP (still or animated): the first frame on its canvas, RGBA, not premultiplied.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>

#include "vision/image_decoders.h"

namespace qs::vision {

Result<DecodedImage> decode_webp(std::string_view bytes, const std::string& name,
                                 int64_t max_pixels) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  // The canvas size from the header (VP8X, or the VP8/VP8L frame header) before any decoding.
  WebPBitstreamFeatures features;
  const VP8StatusCode probe = WebPGetFeatures(data, bytes.size(), &features);
  if (probe != VP8_STATUS_OK) {
    return data_loss(name + ": not a readable WebP (libwebp status " + std::to_string(probe) +
                     (probe == VP8_STATUS_NOT_ENOUGH_DATA ? ", truncated" : "") + ")");
  }
  QS_RETURN_IF_ERROR(check_image_size(features.width, features.height, max_pixels, name));
  const WebPData webp{data, bytes.size()};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return internal_error(name + ": libwebp mismatch");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  WebPAnimDecoder* decoder = WebPAnimDecoderNew(&webp, &options);
  if (decoder == nullptr) return data_loss(name + ": not a readable WebP (bad container)");
  DecodedImage out;
  WebPAnimInfo info;
  uint8_t* canvas = nullptr;
  int timestamp = 0;
  Status status;
  if (!WebPAnimDecoderGetInfo(decoder, &info) || info.frame_count == 0) {
    status = data_loss(name + ": a WebP without a frame");
  } else if (static_cast<int64_t>(info.canvas_width) != features.width ||
             static_cast<int64_t>(info.canvas_height) != features.height) {
    status = data_loss(name + ": the WebP's canvas disagrees with its header");
  } else if (!WebPAnimDecoderGetNext(decoder, &canvas, &timestamp) || canvas == nullptr) {
    status = data_loss(name + ": the WebP's first frame does not decode (corrupt or truncated)");
  } else {
    out.width = info.canvas_width;
    out.height = info.canvas_height;
    const size_t n = static_cast<size_t>(out.width * out.height);
    // Pillow's mode is RGBA when WebPGetFeatures reports alpha and RGBX (alpha ignored)
    // otherwise.
    if (features.has_alpha) {
      out.channels = 4;
      out.pixels.assign(canvas, canvas + n * 4);
    } else {
      out.channels = 3;
      out.pixels.resize(n * 3);
      for (size_t i = 0; i < n; ++i) std::memcpy(&out.pixels[3 * i], canvas + 4 * i, 3);
    }
    WebPChunkIterator chunk;
    if (WebPDemuxGetChunk(WebPAnimDecoderGetDemuxer(decoder), "EXIF", 1, &chunk)) {
      out.exif.assign(reinterpret_cast<const char*>(chunk.chunk.bytes), chunk.chunk.size);
      WebPDemuxReleaseChunkIterator(&chunk);
    }
  }
  WebPAnimDecoderDelete(decoder);
  if (!status.ok()) return status;
  return out;
}

}  // namespace qs::vision
