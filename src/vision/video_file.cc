// vision: reading video files (see video_file.h): a demux-only scan for the count, rate and
// length, then one decode from the start that converts only the picked frames to RGB.
#include "vision/video_file.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include "vision/video_input.h"

namespace qs::vision {
namespace {

struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct SwsDeleter {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;

// The first video stream that is not a cover picture: PyAV's streams.video[0], which
// transformers decodes, less the album art an audio file may carry.
int first_video_stream(const AVFormatContext* fmt) {
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVStream* st = fmt->streams[i];
    if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
        !(st->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

struct ScannedVideo {
  int stream = -1;
  VideoInfo info;
};

// Everything known before a frame is decoded: the stream, its size (from the codec
// parameters), and its frames, rate and length from reading every packet once.
Result<ScannedVideo> scan_video(VideoInput& in, const std::string& name,
                                const VideoReadOptions& options) {
  if (options.max_pixels <= 0 || options.max_frames <= 0 || !(options.max_seconds > 0)) {
    return invalid_argument(name + ": the video limits must be positive");
  }
  AVFormatContext* fmt = in.format();
  ScannedVideo out;
  out.stream = first_video_stream(fmt);
  if (out.stream < 0) return invalid_argument(name + ": the file holds no video stream");
  const AVStream* st = fmt->streams[out.stream];
  VideoInfo& info = out.info;
  info.container = fmt->iformat->name;
  info.codec = avcodec_get_name(st->codecpar->codec_id);
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    info.has_audio |= fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_AUDIO;
  }
  info.width = st->codecpar->width;
  info.height = st->codecpar->height;
  if (info.width <= 0 || info.height <= 0) {
    return data_loss(name + ": the video stream's frames are " + std::to_string(info.width) + "x" +
                     std::to_string(info.height) + " pixels");
  }
  if (info.width > options.max_pixels / info.height) {
    return out_of_range(name + ": the video's frames are " + std::to_string(info.width) + "x" +
                        std::to_string(info.height) + " pixels, more than the limit of " +
                        std::to_string(options.max_pixels));
  }
  const double tb = av_q2d(st->time_base);
  int64_t first_pts = INT64_MAX, end_pts = INT64_MIN;
  PacketPtr pkt(av_packet_alloc());
  if (!pkt) return internal_error(name + ": out of memory");
  for (;;) {
    const int err = av_read_frame(fmt, pkt.get());
    if (err == AVERROR_EOF) break;
    if (err < 0) {
      return data_loss(name + ": the video is truncated or corrupt after " +
                       std::to_string(info.n_frames) + " frames (" + av_error_text(err) + ")");
    }
    const bool ours = pkt->stream_index == out.stream;
    const int flags = pkt->flags;
    const int64_t pts = pkt->pts, duration = pkt->duration;
    av_packet_unref(pkt.get());
    if (!ours) continue;
    if (flags & AV_PKT_FLAG_CORRUPT) {
      return data_loss(name + ": the video is truncated or corrupt at frame " +
                       std::to_string(info.n_frames));
    }
    if (flags & AV_PKT_FLAG_DISCARD) continue;  // decoded for reference, never shown
    if (++info.n_frames > options.max_frames) {
      return out_of_range(name + ": the video has more than " + std::to_string(options.max_frames) +
                          " frames, the limit");
    }
    if (pts != AV_NOPTS_VALUE) {
      first_pts = std::min(first_pts, pts);
      end_pts = std::max(end_pts, pts + std::max<int64_t>(duration, 0));
    }
  }
  if (info.n_frames == 0) return data_loss(name + ": the video stream holds no frames");
  if (st->nb_frames > info.n_frames) {
    return data_loss(name + ": the video is truncated: its header promises " +
                     std::to_string(st->nb_frames) + " frames, " + std::to_string(info.n_frames) +
                     " are there");
  }
  const double span = end_pts > first_pts ? static_cast<double>(end_pts - first_pts) * tb : 0.0;
  if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) {
    info.fps = av_q2d(st->avg_frame_rate);
  } else if (span > 0) {
    info.fps = static_cast<double>(info.n_frames) / span;
  } else if (st->r_frame_rate.num > 0 && st->r_frame_rate.den > 0) {
    info.fps = av_q2d(st->r_frame_rate);
  }
  if (!(info.fps > 0) || !std::isfinite(info.fps)) {
    return data_loss(name + ": the video states no frame rate and its timestamps give none");
  }
  info.duration_seconds = static_cast<double>(info.n_frames) / info.fps;
  const double length = std::max(info.duration_seconds, std::isfinite(span) ? span : 0.0);
  if (length > options.max_seconds) {
    return out_of_range(name + ": the video lasts " + std::to_string(length) +
                        " s, more than the limit of " + std::to_string(options.max_seconds) + " s");
  }
  return out;
}

// The picker's answer, checked: ascending indices of real frames within the RGB budget.
Result<std::vector<int64_t>> picked_frames(const VideoFramePicker& pick, const VideoInfo& info,
                                           const std::string& name,
                                           const VideoReadOptions& options) {
  std::vector<int64_t> indices;
  if (pick) {
    Result<std::vector<int64_t>> r = pick(info);
    if (!r.ok()) return r.status().with_context(name);
    indices = std::move(r).value();
  } else {
    indices.resize(static_cast<size_t>(info.n_frames));
    for (int64_t i = 0; i < info.n_frames; ++i) indices[static_cast<size_t>(i)] = i;
  }
  if (indices.empty()) return invalid_argument(name + ": no frame of the video was picked");
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= info.n_frames || (i > 0 && indices[i] < indices[i - 1])) {
      return internal_error(name + ": frame index " + std::to_string(indices[i]) +
                            " picked out of order or outside the video's " +
                            std::to_string(info.n_frames) + " frames");
    }
  }
  const int64_t frame_bytes = info.width * info.height * 3;
  if (static_cast<int64_t>(indices.size()) > options.max_rgb_bytes / frame_bytes) {
    return out_of_range(name + ": " + std::to_string(indices.size()) + " frames of " +
                        std::to_string(info.width) + "x" + std::to_string(info.height) +
                        " take more than the limit of " + std::to_string(options.max_rgb_bytes) +
                        " bytes");
  }
  return indices;
}

// Converts decoded frames to packed RGB24 as PyAV's VideoFrame.to_ndarray("rgb24") does:
// swscale with SWS_BILINEAR, the frame's colorspace coefficients and its range (full for the
// JPEG range and the yuvj formats), full-range RGB out.
class RgbConverter {
 public:
  Status convert(const AVFrame* f, uint8_t* dst) {
    const auto fmt = static_cast<AVPixelFormat>(f->format);
    sws_.reset(sws_getCachedContext(sws_.release(), f->width, f->height, fmt, f->width, f->height,
                                    AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr));
    if (!sws_) {
      const char* fmt_name = av_get_pix_fmt_name(fmt);
      return unimplemented(std::string("cannot convert ") + (fmt_name ? fmt_name : "?") +
                           " frames to RGB");
    }
    const bool full_range = f->color_range == AVCOL_RANGE_JPEG || fmt == AV_PIX_FMT_YUVJ420P ||
                            fmt == AV_PIX_FMT_YUVJ422P || fmt == AV_PIX_FMT_YUVJ444P ||
                            fmt == AV_PIX_FMT_YUVJ440P || fmt == AV_PIX_FMT_YUVJ411P;
    // sws_getCoefficients takes AVColorSpace values (BT709 = 1, FCC = 4, BT470BG and
    // SMPTE170M = 5 and 6, SMPTE240M = 7, BT2020 = 9) and falls back to BT.601 otherwise.
    sws_setColorspaceDetails(sws_.get(), sws_getCoefficients(f->colorspace), full_range ? 1 : 0,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    uint8_t* planes[4] = {dst, nullptr, nullptr, nullptr};
    const int strides[4] = {f->width * 3, 0, 0, 0};
    const int rows = sws_scale(sws_.get(), f->data, f->linesize, 0, f->height, planes, strides);
    if (rows != f->height)
      return internal_error("swscale converted " + std::to_string(rows) + " of " +
                            std::to_string(f->height) + " rows");
    return ok_status();
  }

 private:
  std::unique_ptr<SwsContext, SwsDeleter> sws_;
};

// Decodes from the start and keeps the frames `indices` names (presentation order, as the
// decoder outputs them), stopping after the last.
Status decode_picked(VideoInput& in, int stream, const std::string& name,
                     const VideoReadOptions& options, VideoFrames* out) {
  Result<AVCodecContext*> dec = in.open_decoder(stream, options.threads);
  if (!dec.ok()) return dec.status().with_context(name);
  AVCodecContext* ctx = *dec;
  const VideoInfo& info = out->info;
  const double tb = av_q2d(in.format()->streams[stream]->time_base);
  const size_t frame_bytes = static_cast<size_t>(info.width * info.height * 3);
  out->pixels.resize(out->indices.size() * frame_bytes);
  out->seconds.resize(out->indices.size());
  PacketPtr pkt(av_packet_alloc());
  FramePtr frame(av_frame_alloc());
  if (!pkt || !frame) return internal_error(name + ": out of memory");
  RgbConverter rgb;
  size_t next = 0;  // the next entry of indices to fill
  int64_t decoded = 0;
  // Takes every frame the decoder has ready; false once the last picked frame is in.
  auto drain = [&]() -> Result<bool> {
    for (;;) {
      const int err = avcodec_receive_frame(ctx, frame.get());
      if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return true;
      if (err < 0) {
        return data_loss(name + ": cannot decode frame " + std::to_string(decoded) + ": " +
                         av_error_text(err));
      }
      if (frame->width != info.width || frame->height != info.height) {
        return unimplemented(name + ": frame " + std::to_string(decoded) + " is " +
                             std::to_string(frame->width) + "x" + std::to_string(frame->height) +
                             ", the stream's are " + std::to_string(info.width) + "x" +
                             std::to_string(info.height) + " (a size change mid-stream)");
      }
      if (next < out->indices.size() && out->indices[next] == decoded) {
        const size_t first = next;
        QS_RETURN_IF_ERROR(rgb.convert(frame.get(), &out->pixels[first * frame_bytes]));
        const int64_t pts = frame->best_effort_timestamp;
        const double t = pts == AV_NOPTS_VALUE ? static_cast<double>(decoded) / info.fps
                                               : static_cast<double>(pts) * tb;
        out->seconds[next++] = t;
        // A frame picked twice is copied, not converted twice.
        while (next < out->indices.size() && out->indices[next] == decoded) {
          std::copy_n(&out->pixels[first * frame_bytes], frame_bytes,
                      &out->pixels[next * frame_bytes]);
          out->seconds[next++] = t;
        }
      }
      av_frame_unref(frame.get());
      ++decoded;
      if (next == out->indices.size()) return false;
    }
  };
  bool more = true;
  while (more) {
    const int err = av_read_frame(in.format(), pkt.get());
    if (err == AVERROR_EOF) break;
    if (err < 0) {
      return data_loss(name + ": the video is truncated or corrupt after " +
                       std::to_string(decoded) + " frames (" + av_error_text(err) + ")");
    }
    if (pkt->stream_index != stream) {
      av_packet_unref(pkt.get());
      continue;
    }
    const int sent = avcodec_send_packet(ctx, pkt.get());
    av_packet_unref(pkt.get());
    if (sent < 0 && sent != AVERROR(EAGAIN)) {
      return data_loss(name + ": corrupt video data near frame " + std::to_string(decoded) + ": " +
                       av_error_text(sent));
    }
    QS_ASSIGN_OR_RETURN(more, drain());
  }
  if (more) {
    avcodec_send_packet(ctx, nullptr);  // flush the frames the decoder still holds
    QS_ASSIGN_OR_RETURN(more, drain());
  }
  if (next < out->indices.size()) {
    return data_loss(name + ": the video stream ended after " + std::to_string(decoded) +
                     " decoded frames, before frame " + std::to_string(out->indices[next]) +
                     " of " + std::to_string(info.n_frames) + " (truncated or corrupt)");
  }
  return ok_status();
}

Result<VideoFrames> read_video(const VideoSource& source, const VideoFramePicker& pick,
                               const VideoReadOptions& options) {
  VideoFrames out;
  int stream = -1;
  {
    QS_ASSIGN_OR_RETURN(std::unique_ptr<VideoInput> in, VideoInput::open(source));
    QS_ASSIGN_OR_RETURN(ScannedVideo scan, scan_video(*in, source.name, options));
    out.info = std::move(scan.info);
    stream = scan.stream;
  }
  QS_ASSIGN_OR_RETURN(out.indices, picked_frames(pick, out.info, source.name, options));
  // The scan read to the end; a second demuxer decodes from the start rather than trusting
  // every container's seek to frame 0.
  QS_ASSIGN_OR_RETURN(std::unique_ptr<VideoInput> in, VideoInput::open(source));
  QS_RETURN_IF_ERROR(decode_picked(*in, stream, source.name, options, &out));
  return out;
}

}  // namespace

Result<VideoInfo> probe_video_bytes(std::string_view bytes, const std::string& name,
                                    const VideoReadOptions& options) {
  if (bytes.empty()) return invalid_argument(name + ": the video is empty (0 bytes)");
  QS_ASSIGN_OR_RETURN(std::unique_ptr<VideoInput> in,
                      VideoInput::open(VideoSource{.path = {}, .bytes = bytes, .name = name}));
  QS_ASSIGN_OR_RETURN(ScannedVideo scan, scan_video(*in, name, options));
  return scan.info;
}

Result<VideoFrames> read_video_bytes(std::string_view bytes, const std::string& name,
                                     const VideoFramePicker& pick,
                                     const VideoReadOptions& options) {
  if (bytes.empty()) return invalid_argument(name + ": the video is empty (0 bytes)");
  return read_video(VideoSource{.path = {}, .bytes = bytes, .name = name}, pick, options);
}

Result<VideoFrames> read_video_file(const std::string& path, const VideoFramePicker& pick,
                                    const VideoReadOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return not_found(path + ": no such video file");
  return read_video(VideoSource{.path = path, .bytes = {}, .name = path}, pick, options);
}

}  // namespace qs::vision
