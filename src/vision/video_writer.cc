// vision: writing generated frames (see video_writer.h): swscale to BT.709 yuv420p, libx264,
// and the mp4 muxer writing into memory; PNG frames through diffusion's PNG writer.
#include "vision/video_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <string_view>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
#include <libswscale/swscale.h>
}

#include "diffusion/png_image.h"
#include "vision/video_input.h"

namespace qs::vision {
namespace {

constexpr const char* kEncoderName = "libx264";
constexpr int kMaxFps = 240;
// Our own bound, far above any generated video, that keeps every size product well inside
// int64 and int (FFmpeg's widths and strides are ints).
constexpr int64_t kMaxSide = 16384;
constexpr int kMuxBufferBytes = 1 << 16;
// libx264's presets (x264_preset_names), checked here so a typo gets a message that lists them
// rather than avcodec_open2's bare "Invalid argument".
constexpr const char* kPresets[] = {"ultrafast", "superfast", "veryfast", "faster",   "fast",
                                    "medium",    "slow",      "slower",   "veryslow", "placebo"};

struct FormatDeleter {
  void operator()(AVFormatContext* f) const { avformat_free_context(f); }
};
struct CodecDeleter {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct OutFrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct OutPacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct OutSwsDeleter {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
// An AVIOContext of avio_alloc_context: avio may have swapped the buffer it was given for
// another, so the one it holds at the end is freed.
struct IoDeleter {
  void operator()(AVIOContext* io) const {
    av_freep(&io->buffer);
    avio_context_free(&io);
  }
};
using FormatPtr = std::unique_ptr<AVFormatContext, FormatDeleter>;
using CodecPtr = std::unique_ptr<AVCodecContext, CodecDeleter>;
using OutFramePtr = std::unique_ptr<AVFrame, OutFrameDeleter>;
using OutPacketPtr = std::unique_ptr<AVPacket, OutPacketDeleter>;
using SwsPtr = std::unique_ptr<SwsContext, OutSwsDeleter>;
using IoPtr = std::unique_ptr<AVIOContext, IoDeleter>;

// libx264 reports its settings at the info level; the caller gets failures as a Status. (The
// reader silences the same log, video_input.cc; names here differ from the reader's since the
// room compiles in unity batches.)
void quiet_encoder_log() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(AV_LOG_QUIET); });
}

// fseek's contract over a buffer of `size` bytes, as AVIOContext's seek callback wants it.
int64_t seek_within(int64_t size, int64_t* pos, int64_t offset, int whence) {
  if (whence & AVSEEK_SIZE) return size;
  int64_t to = offset;
  switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET:
      break;
    case SEEK_CUR:
      to = *pos + offset;
      break;
    case SEEK_END:
      to = size + offset;
      break;
    default:
      return AVERROR(EINVAL);
  }
  if (to < 0 || to > size) return AVERROR(EINVAL);
  *pos = to;
  return to;
}

// The MP4 being written. The muxer seeks back to patch box sizes, and faststart moves the
// media data up to make room for the moov box, so a write may land anywhere in the buffer.
struct MemoryFile {
  std::string bytes;
  int64_t pos = 0;

  static int write(void* opaque, uint8_t* buf, int size) {
    auto* f = static_cast<MemoryFile*>(opaque);
    const auto end = static_cast<size_t>(f->pos + size);
    try {
      if (end > f->bytes.size()) f->bytes.resize(end);
    } catch (const std::bad_alloc&) {
      return AVERROR(ENOMEM);
    }
    std::memcpy(f->bytes.data() + f->pos, buf, static_cast<size_t>(size));
    f->pos += size;
    return size;
  }

  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* f = static_cast<MemoryFile*>(opaque);
    return seek_within(static_cast<int64_t>(f->bytes.size()), &f->pos, offset, whence);
  }
};

// faststart's second pass: the mov muxer re-opens its output for reading through
// AVFormatContext.io_open (by URL, which for memory names nothing) and reads the media data
// back while it shifts it. These open and close a reader over the MemoryFile in
// AVFormatContext.opaque.
struct MemoryView {
  const std::string* bytes = nullptr;
  int64_t pos = 0;

  static int read(void* opaque, uint8_t* buf, int size) {
    auto* v = static_cast<MemoryView*>(opaque);
    const int64_t left = static_cast<int64_t>(v->bytes->size()) - v->pos;
    if (left <= 0) return AVERROR_EOF;
    const int n = static_cast<int>(std::min<int64_t>(left, size));
    std::memcpy(buf, v->bytes->data() + v->pos, static_cast<size_t>(n));
    v->pos += n;
    return n;
  }

  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* v = static_cast<MemoryView*>(opaque);
    return seek_within(static_cast<int64_t>(v->bytes->size()), &v->pos, offset, whence);
  }
};

int open_memory_reader(AVFormatContext* s, AVIOContext** pb, const char* /*url*/, int flags,
                       AVDictionary** /*options*/) {
  if (flags & AVIO_FLAG_WRITE) return AVERROR(EPERM);  // the muxer only writes through s->pb
  std::unique_ptr<MemoryView> view(new (std::nothrow) MemoryView);
  auto* buffer = static_cast<unsigned char*>(av_malloc(kMuxBufferBytes));
  if (!view || buffer == nullptr) {
    av_free(buffer);
    return AVERROR(ENOMEM);
  }
  view->bytes = &static_cast<const MemoryFile*>(s->opaque)->bytes;
  *pb = avio_alloc_context(buffer, kMuxBufferBytes, 0, view.get(), &MemoryView::read, nullptr,
                           &MemoryView::seek);
  if (*pb == nullptr) {
    av_free(buffer);
    return AVERROR(ENOMEM);
  }
  view.release();  // owned by the AVIOContext now, freed by close_memory_reader
  return 0;
}

int close_memory_reader(AVFormatContext* /*s*/, AVIOContext* pb) {
  delete static_cast<MemoryView*>(pb->opaque);
  IoDeleter()(pb);
  return 0;
}

std::string size_text(int64_t height, int64_t width) {
  return std::to_string(width) + "x" + std::to_string(height);
}

// What encode_mp4 and write_png_frames both need: frames that exist and sizes whose products
// fit.
Status check_frames(const char* what, const uint8_t* rgb, int64_t n_frames, int64_t height,
                    int64_t width) {
  if (n_frames <= 0) {
    return invalid_argument(std::string(what) +
                            ": no frames to write (n_frames = " + std::to_string(n_frames) + ")");
  }
  if (height <= 0 || width <= 0) {
    return invalid_argument(std::string(what) + ": frames of " + size_text(height, width) +
                            " pixels (width x height must both be positive)");
  }
  if (height > kMaxSide || width > kMaxSide) {
    return invalid_argument(std::string(what) + ": frames of " + size_text(height, width) +
                            " pixels, more than " + std::to_string(kMaxSide) + " a side");
  }
  if (n_frames > INT64_MAX / (height * width * 3)) {
    return invalid_argument(std::string(what) + ": " + std::to_string(n_frames) + " frames of " +
                            size_text(height, width) + " pixels overflow a byte count");
  }
  if (rgb == nullptr) return invalid_argument(std::string(what) + ": no pixel buffer (null)");
  return ok_status();
}

Status check_options(const VideoWriteOptions& options) {
  if (options.fps <= 0 || options.fps > kMaxFps) {
    return invalid_argument("encode_mp4: fps must be from 1 to " + std::to_string(kMaxFps) +
                            ", got " + std::to_string(options.fps));
  }
  if (options.crf < 0 || options.crf > 51) {
    return invalid_argument("encode_mp4: crf must be from 0 to 51 (libx264's 8-bit range), got " +
                            std::to_string(options.crf));
  }
  if (std::find(std::begin(kPresets), std::end(kPresets), std::string_view(options.preset)) ==
      std::end(kPresets)) {
    std::string names;
    for (const char* p : kPresets) names += std::string(names.empty() ? "" : ", ") + p;
    return invalid_argument("encode_mp4: unknown libx264 preset '" + options.preset + "' (one of " +
                            names + ")");
  }
  if (options.threads < 0) {
    return invalid_argument("encode_mp4: threads must be 0 (automatic) or more, got " +
                            std::to_string(options.threads));
  }
  return ok_status();
}

// RGB24 to limited-range BT.709 yuv420p, the chroma filtered down with the bicubic filter of
// FFmpeg's command line (what imageio-ffmpeg gets), rounded accurately.
Result<SwsPtr> rgb_to_yuv(int width, int height) {
  SwsPtr sws(sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P,
                            SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr));
  if (!sws) return internal_error("encode_mp4: cannot convert RGB24 to yuv420p (swscale)");
  // For RGB in, swscale takes the RGB->YUV matrix from the destination table; the source's
  // (the first) is not used. 1 / 0: full-range RGB in, limited-range YUV out.
  if (sws_setColorspaceDetails(sws.get(), sws_getCoefficients(SWS_CS_DEFAULT), 1,
                               sws_getCoefficients(SWS_CS_ITU709), 0, 0, 1 << 16, 1 << 16) < 0) {
    return internal_error("encode_mp4: swscale refused the BT.709 matrix");
  }
  return sws;
}

// Takes every packet the encoder has ready into the muxer.
Status mux_ready_packets(AVCodecContext* enc, AVFormatContext* fmt, AVStream* st, AVPacket* pkt) {
  for (;;) {
    int err = avcodec_receive_packet(enc, pkt);
    if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return ok_status();
    if (err < 0) return internal_error("encode_mp4: libx264 failed: " + av_error_text(err));
    // One frame per packet: the muxer needs the last frame's duration for the track's length.
    if (pkt->duration <= 0) pkt->duration = 1;
    av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
    pkt->stream_index = st->index;
    err = av_interleaved_write_frame(fmt, pkt);  // takes the packet's reference
    if (err < 0) return internal_error("encode_mp4: the mp4 muxer failed: " + av_error_text(err));
  }
}

}  // namespace

Result<std::string> encode_mp4(const uint8_t* rgb, int64_t n_frames, int64_t height, int64_t width,
                               const VideoWriteOptions& options) {
  QS_RETURN_IF_ERROR(check_frames("encode_mp4", rgb, n_frames, height, width));
  QS_RETURN_IF_ERROR(check_options(options));
  if (height % 2 != 0 || width % 2 != 0) {
    return invalid_argument("encode_mp4: frames of " + size_text(height, width) +
                            " pixels; yuv420p halves the colour resolution both ways, so width "
                            "and height must be even (Wan's sizes are multiples of 16)");
  }
  quiet_encoder_log();
  const AVCodec* codec = avcodec_find_encoder_by_name(kEncoderName);
  if (codec == nullptr) {
    return unimplemented(std::string("encode_mp4: this FFmpeg has no H.264 encoder named ") +
                         kEncoderName + " (libavcodec built without libx264)");
  }
  const auto w = static_cast<int>(width), h = static_cast<int>(height);
  const std::string what = "encode_mp4 (" + size_text(height, width) + ", " + kEncoderName +
                           " preset " + options.preset + " crf " + std::to_string(options.crf) +
                           ")";

  // Declared first: the muxer's context writes into it until it is freed.
  MemoryFile file;
  auto* buffer = static_cast<unsigned char*>(av_malloc(kMuxBufferBytes));
  if (buffer == nullptr) return internal_error(what + ": out of memory");
  IoPtr io(avio_alloc_context(buffer, kMuxBufferBytes, 1, &file, nullptr, &MemoryFile::write,
                              &MemoryFile::seek));
  if (!io) {
    av_free(buffer);
    return internal_error(what + ": out of memory");
  }
  AVFormatContext* raw_fmt = nullptr;
  int err = avformat_alloc_output_context2(&raw_fmt, nullptr, "mp4", nullptr);
  FormatPtr fmt(raw_fmt);
  if (err < 0 || !fmt) {
    return internal_error(what + ": no mp4 muxer in this FFmpeg: " + av_error_text(err));
  }
  fmt->pb = io.get();
  fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
  fmt->opaque = &file;
  fmt->io_open = &open_memory_reader;
  fmt->io_close2 = &close_memory_reader;

  CodecPtr enc(avcodec_alloc_context3(codec));
  if (!enc) return internal_error(what + ": out of memory");
  enc->width = w;
  enc->height = h;
  enc->pix_fmt = AV_PIX_FMT_YUV420P;
  enc->time_base = AVRational{1, options.fps};
  enc->framerate = AVRational{options.fps, 1};
  enc->sample_aspect_ratio = AVRational{1, 1};
  // What rgb_to_yuv produces; libx264 writes these into the stream's VUI, which decoders (and
  // read_video_*) use to pick the matrix back to RGB.
  enc->colorspace = AVCOL_SPC_BT709;
  enc->color_primaries = AVCOL_PRI_BT709;
  enc->color_trc = AVCOL_TRC_BT709;
  enc->color_range = AVCOL_RANGE_MPEG;
  enc->thread_count = options.threads;
  // MP4 keeps the SPS/PPS in the avcC box rather than in the stream.
  if (fmt->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary* codec_options = nullptr;
  av_dict_set(&codec_options, "preset", options.preset.c_str(), 0);
  av_dict_set(&codec_options, "crf", std::to_string(options.crf).c_str(), 0);
  // libx264 r3095's AVX-512 code reads memory it never wrote (the same frames gave other bytes
  // from call to call in one process, and the same bytes under MALLOC_PERTURB_ or without
  // AVX-512), so on an AVX-512 CPU its assembly is capped at AVX2 (its "AVX2" set: AVX, FMA3,
  // BMI2 and below), which every such CPU has.
  if (__builtin_cpu_supports("avx512f")) av_dict_set(&codec_options, "x264-params", "asm=AVX2", 0);
  err = avcodec_open2(enc.get(), codec, &codec_options);
  av_dict_free(&codec_options);
  if (err < 0) return internal_error(what + ": cannot open the encoder: " + av_error_text(err));

  AVStream* st = avformat_new_stream(fmt.get(), nullptr);
  if (st == nullptr) return internal_error(what + ": out of memory");
  err = avcodec_parameters_from_context(st->codecpar, enc.get());
  if (err < 0) return internal_error(what + ": " + av_error_text(err));
  st->time_base = enc->time_base;  // a hint: the muxer picks its own timescale from it
  st->avg_frame_rate = enc->framerate;
  AVDictionary* mux_options = nullptr;
  // The moov box (the index) before the media data: a client can start playing, and a
  // browser can seek, before the last byte has arrived.
  av_dict_set(&mux_options, "movflags", "+faststart", 0);
  err = avformat_write_header(fmt.get(), &mux_options);
  av_dict_free(&mux_options);
  if (err < 0) {
    return internal_error(what + ": the mp4 muxer refused the stream: " + av_error_text(err));
  }

  QS_ASSIGN_OR_RETURN(SwsPtr sws, rgb_to_yuv(w, h));
  OutFramePtr frame(av_frame_alloc());
  OutPacketPtr pkt(av_packet_alloc());
  if (!frame || !pkt) return internal_error(what + ": out of memory");
  frame->format = AV_PIX_FMT_YUV420P;
  frame->width = w;
  frame->height = h;
  frame->colorspace = enc->colorspace;
  frame->color_primaries = enc->color_primaries;
  frame->color_trc = enc->color_trc;
  frame->color_range = enc->color_range;
  err = av_frame_get_buffer(frame.get(), 0);
  if (err < 0) return internal_error(what + ": out of memory");
  const int64_t frame_bytes = height * width * 3;
  const int rgb_stride[4] = {w * 3, 0, 0, 0};
  // swscale's SIMD reads RGB24 rows in 16-byte loads that run a few bytes past the last pixel
  // (valgrind saw 4 with FFmpeg 5.1): within the caller's buffer for every row but the last
  // frame's last one, so that frame is converted from a copy with FFmpeg's input padding.
  std::vector<uint8_t> last_frame(static_cast<size_t>(frame_bytes) + AV_INPUT_BUFFER_PADDING_SIZE);
  std::memcpy(last_frame.data(), rgb + (n_frames - 1) * frame_bytes,
              static_cast<size_t>(frame_bytes));
  for (int64_t i = 0; i < n_frames; ++i) {
    // The encoder may still hold the last frame's buffers; this gives us fresh ones if so.
    err = av_frame_make_writable(frame.get());
    if (err < 0) return internal_error(what + ": out of memory");
    const uint8_t* src = i + 1 < n_frames ? rgb + i * frame_bytes : last_frame.data();
    const uint8_t* planes[4] = {src, nullptr, nullptr, nullptr};
    const int rows = sws_scale(sws.get(), planes, rgb_stride, 0, h, frame->data, frame->linesize);
    if (rows != h) {
      return internal_error(what + ": swscale converted " + std::to_string(rows) + " of " +
                            std::to_string(h) + " rows of frame " + std::to_string(i));
    }
    frame->pts = i;
    err = avcodec_send_frame(enc.get(), frame.get());
    if (err < 0) {
      return internal_error(what + ": libx264 refused frame " + std::to_string(i) + ": " +
                            av_error_text(err));
    }
    QS_RETURN_IF_ERROR(mux_ready_packets(enc.get(), fmt.get(), st, pkt.get()));
  }
  err = avcodec_send_frame(enc.get(), nullptr);  // flush: libx264 holds frames for lookahead
  if (err < 0) return internal_error(what + ": cannot flush libx264: " + av_error_text(err));
  QS_RETURN_IF_ERROR(mux_ready_packets(enc.get(), fmt.get(), st, pkt.get()));
  err = av_write_trailer(fmt.get());
  if (err < 0 || io->error < 0) {
    return internal_error(what +
                          ": cannot finish the mp4: " + av_error_text(err < 0 ? err : io->error));
  }
  return std::move(file.bytes);
}

Status write_mp4(const std::string& path, const uint8_t* rgb, int64_t n_frames, int64_t height,
                 int64_t width, const VideoWriteOptions& options) {
  if (path.empty()) return invalid_argument("write_mp4: empty output path");
  Result<std::string> bytes = encode_mp4(rgb, n_frames, height, width, options);
  if (!bytes.ok()) return bytes.status().with_context(path);
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    return not_found(path + ": cannot write the video: the directory " + parent.string() +
                     " does not exist");
  }
  // Beside the target, so that the rename stays on one file system and is atomic.
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error("cannot write " + tmp + ": " + std::strerror(errno));
  bool ok = std::fwrite(bytes->data(), 1, bytes->size(), f) == bytes->size();
  int saved_errno = errno;
  // A full disk may only show when the buffer is flushed at close.
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    saved_errno = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    return io_error("cannot write " + std::to_string(bytes->size()) + " bytes to " + tmp + ": " +
                    std::strerror(saved_errno));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return io_error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  return ok_status();
}

Status write_png_frames(const std::string& dir, const uint8_t* rgb, int64_t n_frames,
                        int64_t height, int64_t width) {
  QS_RETURN_IF_ERROR(check_frames("write_png_frames", rgb, n_frames, height, width));
  if (dir.empty()) return invalid_argument("write_png_frames: empty directory path");
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    return io_error("write_png_frames: cannot create the directory " + dir + ": " +
                    (ec ? ec.message() : "a file of that name is in the way"));
  }
  const auto digits =
      std::max<size_t>(4, std::to_string(std::max<int64_t>(n_frames - 1, 0)).size());
  const auto frame_bytes = static_cast<size_t>(height * width * 3);
  std::vector<uint8_t> pixels(frame_bytes);
  for (int64_t i = 0; i < n_frames; ++i) {
    std::string number = std::to_string(i);
    number.insert(0, digits - number.size(), '0');
    std::memcpy(pixels.data(), rgb + static_cast<size_t>(i) * frame_bytes, frame_bytes);
    const std::string path = (fs::path(dir) / ("frame_" + number + ".png")).string();
    QS_RETURN_IF_ERROR(diffusion::write_png(path, width, height, pixels));
  }
  return ok_status();
}

}  // namespace qs::vision
