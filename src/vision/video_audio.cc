// vision: a video's sound (see read_video_audio_bytes in video_file.h): the first audio
// stream decoded by libavcodec and resampled by libswresample, as PyAV's AudioResampler
// (format "flt", layout "mono") does with the same library's defaults.
#include <memory>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/frame.h>
#include <libswresample/swresample.h>
}

#include "vision/video_file.h"
#include "vision/video_input.h"

namespace qs::vision {
namespace {

struct SwrDeleter {
  void operator()(SwrContext* s) const { swr_free(&s); }
};
struct AudioPacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct AudioFrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};

// Appends what the resampler gives for `frame` (nullptr: its delayed tail) to `out`.
Status resample_into(SwrContext* swr, const AVFrame* frame, std::vector<float>* out) {
  const int in_samples = frame ? frame->nb_samples : 0;
  const int room = swr_get_out_samples(swr, in_samples);
  if (room < 0) return internal_error("swresample: " + av_error_text(room));
  const size_t at = out->size();
  out->resize(at + static_cast<size_t>(room));
  auto* dst = reinterpret_cast<uint8_t*>(out->data() + at);
  const int n =
      swr_convert(swr, &dst, room,
                  frame ? const_cast<const uint8_t**>(frame->extended_data) : nullptr, in_samples);
  if (n < 0) return internal_error("swresample: " + av_error_text(n));
  out->resize(at + static_cast<size_t>(n));
  return ok_status();
}

}  // namespace

Result<std::vector<float>> read_video_audio_bytes(std::string_view bytes, const std::string& name,
                                                  int sample_rate, double max_seconds) {
  if (bytes.empty()) return invalid_argument(name + ": the video is empty (0 bytes)");
  if (sample_rate < 1000 || sample_rate > 384000 || !(max_seconds > 0)) {
    return invalid_argument(name + ": sample rate " + std::to_string(sample_rate) +
                            " or length limit out of range");
  }
  QS_ASSIGN_OR_RETURN(std::unique_ptr<VideoInput> in,
                      VideoInput::open(VideoSource{.path = {}, .bytes = bytes, .name = name}));
  AVFormatContext* fmt = in->format();
  int stream = -1;
  for (unsigned i = 0; i < fmt->nb_streams && stream < 0; ++i) {
    if (fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_AUDIO) stream = static_cast<int>(i);
  }
  if (stream < 0) return not_found(name + ": the video has no audio track");
  Result<AVCodecContext*> dec = in->open_decoder(stream, 1);
  if (!dec.ok()) return dec.status().with_context(name + ": audio");
  AVCodecContext* ctx = *dec;
  if (ctx->sample_rate <= 0 || ctx->ch_layout.nb_channels <= 0) {
    return data_loss(name + ": the audio track states no sample rate or channels");
  }
  AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
  SwrContext* raw = nullptr;
  int err = swr_alloc_set_opts2(&raw, &mono, AV_SAMPLE_FMT_FLT, sample_rate, &ctx->ch_layout,
                                ctx->sample_fmt, ctx->sample_rate, 0, nullptr);
  std::unique_ptr<SwrContext, SwrDeleter> swr(raw);
  if (err < 0 || (err = swr_init(swr.get())) < 0) {
    return unimplemented(name + ": cannot resample the audio track: " + av_error_text(err));
  }
  const auto max_samples = static_cast<size_t>(max_seconds * sample_rate);
  std::vector<float> out;
  std::unique_ptr<AVPacket, AudioPacketDeleter> pkt(av_packet_alloc());
  std::unique_ptr<AVFrame, AudioFrameDeleter> frame(av_frame_alloc());
  if (!pkt || !frame) return internal_error(name + ": out of memory");
  auto drain = [&]() -> Status {
    for (;;) {
      const int got = avcodec_receive_frame(ctx, frame.get());
      if (got == AVERROR(EAGAIN) || got == AVERROR_EOF) return ok_status();
      if (got < 0) return data_loss(name + ": cannot decode the audio: " + av_error_text(got));
      // A stream whose format changes mid-way would need a new resampler; refused instead.
      if (frame->sample_rate != ctx->sample_rate || frame->format != ctx->sample_fmt ||
          frame->ch_layout.nb_channels != ctx->ch_layout.nb_channels) {
        return unimplemented(name + ": the audio track changes format mid-stream");
      }
      QS_RETURN_IF_ERROR(resample_into(swr.get(), frame.get(), &out));
      av_frame_unref(frame.get());
      if (out.size() > max_samples) {
        return out_of_range(name + ": the audio track is longer than the limit of " +
                            std::to_string(max_seconds) + " s");
      }
    }
  };
  for (;;) {
    err = av_read_frame(fmt, pkt.get());
    if (err == AVERROR_EOF) break;
    if (err < 0) {
      return data_loss(name + ": the audio is truncated or corrupt (" + av_error_text(err) + ")");
    }
    if (pkt->stream_index == stream) {
      const int sent = avcodec_send_packet(ctx, pkt.get());
      av_packet_unref(pkt.get());
      if (sent < 0 && sent != AVERROR(EAGAIN)) {
        return data_loss(name + ": corrupt audio data: " + av_error_text(sent));
      }
      QS_RETURN_IF_ERROR(drain());
    } else {
      av_packet_unref(pkt.get());
    }
  }
  avcodec_send_packet(ctx, nullptr);
  QS_RETURN_IF_ERROR(drain());
  QS_RETURN_IF_ERROR(resample_into(swr.get(), nullptr, &out));
  return out;
}

}  // namespace qs::vision
