// vision: opening a video container with libavformat (see video_input.h).
#include "vision/video_input.h"

#include <algorithm>
#include <cstring>
#include <mutex>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
}

namespace qs::vision {
namespace {

// The demuxers a video may come through: MP4 / MOV / 3GP ("mov"), Matroska and WebM, AVI,
// MPEG-TS and -PS, FLV, Ogg and ASF. Without the list FFmpeg's probe would also take a text
// file (the "tty" demuxer), a playlist naming other files (hls, concat) or a lone image.
constexpr const char* kVideoDemuxers = "mov,matroska,webm,avi,mpegts,mpeg,flv,ogg,asf";
// The decoders it may open: the common video codecs, and the audio codecs of their tracks
// (video_audio.cc reads those). FFmpeg's rarer decoders are more attack surface than use.
constexpr const char* kVideoDecoders =
    "h264,hevc,vp8,vp9,libdav1d,av1,mpeg4,mpeg2video,mpeg1video,mjpeg,png,ffv1,theora,h263,"
    "prores,dnxhd,rawvideo,qtrle,msmpeg4v3,wmv3,vc1,aac,mp3float,mp3,mp2float,mp2,opus,"
    "libopus,vorbis,flac,alac,ac3,eac3,pcm_s16le,pcm_s16be,pcm_s24le,pcm_f32le,pcm_u8";
constexpr int kIoBufferBytes = 1 << 16;

// FFmpeg prints every problem of a hostile file to stderr; the caller gets each as a Status
// instead, so the library's own log is silenced once per process.
void quiet_ffmpeg_log() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(AV_LOG_QUIET); });
}

}  // namespace

std::string av_error_text(int err) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, text, sizeof text);
  return text;
}

// The AVIOContext's view of an upload: FFmpeg reads and seeks the buffer in place.
struct VideoInput::MemoryReader {
  std::string_view bytes;
  int64_t pos = 0;
  AVIOContext* io = nullptr;

  static int read(void* opaque, uint8_t* buf, int size) {
    auto* r = static_cast<MemoryReader*>(opaque);
    const int64_t left = static_cast<int64_t>(r->bytes.size()) - r->pos;
    if (left <= 0) return AVERROR_EOF;
    const int n = static_cast<int>(std::min<int64_t>(left, size));
    std::memcpy(buf, r->bytes.data() + r->pos, static_cast<size_t>(n));
    r->pos += n;
    return n;
  }

  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* r = static_cast<MemoryReader*>(opaque);
    const auto size = static_cast<int64_t>(r->bytes.size());
    if (whence & AVSEEK_SIZE) return size;
    int64_t to = offset;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET:
        break;
      case SEEK_CUR:
        to = r->pos + offset;
        break;
      case SEEK_END:
        to = size + offset;
        break;
      default:
        return AVERROR(EINVAL);
    }
    if (to < 0 || to > size) return AVERROR(EINVAL);
    r->pos = to;
    return to;
  }
};

Result<std::unique_ptr<VideoInput>> VideoInput::open(const VideoSource& source) {
  quiet_ffmpeg_log();
  std::unique_ptr<VideoInput> in(new VideoInput());
  in->format_ = avformat_alloc_context();
  if (in->format_ == nullptr) return internal_error(source.name + ": out of memory");
  in->format_->format_whitelist = av_strdup(kVideoDemuxers);
  in->format_->codec_whitelist = av_strdup(kVideoDecoders);
  AVDictionary* options = nullptr;
  const char* url = source.path.c_str();
  if (source.path.empty()) {
    in->reader_ = std::make_unique<MemoryReader>();
    in->reader_->bytes = source.bytes;
    auto* buffer = static_cast<unsigned char*>(av_malloc(kIoBufferBytes));
    if (buffer == nullptr) return internal_error(source.name + ": out of memory");
    in->reader_->io = avio_alloc_context(buffer, kIoBufferBytes, 0, in->reader_.get(),
                                         &MemoryReader::read, nullptr, &MemoryReader::seek);
    if (in->reader_->io == nullptr) {
      av_free(buffer);
      return internal_error(source.name + ": out of memory");
    }
    in->format_->pb = in->reader_->io;
    in->format_->flags |= AVFMT_FLAG_CUSTOM_IO;
    url = "";
  } else {
    // The file and nothing it names: no network, no other files through a playlist.
    av_dict_set(&options, "protocol_whitelist", "file", 0);
  }
  int err = avformat_open_input(&in->format_, url, nullptr, &options);
  av_dict_free(&options);
  if (err < 0) {
    // avformat_open_input frees the context on failure.
    in->format_ = nullptr;
    // INVALIDDATA: no demuxer recognised the bytes; EINVAL: one did, but not a video
    // container of the list (a WAV, a JPEG, a playlist).
    if (err == AVERROR_INVALIDDATA || err == AVERROR(EINVAL)) {
      return invalid_argument(source.name +
                              ": not a video (no MP4, MOV, Matroska, WebM, AVI, MPEG, FLV, Ogg "
                              "or ASF container recognised)");
    }
    return invalid_argument(source.name + ": cannot open the video: " + av_error_text(err));
  }
  err = avformat_find_stream_info(in->format_, nullptr);
  if (err < 0) {
    return invalid_argument(source.name +
                            ": cannot read the video's streams: " + av_error_text(err));
  }
  return in;
}

Result<AVCodecContext*> VideoInput::open_decoder(int index, int threads) {
  const AVCodecParameters* par = format_->streams[index]->codecpar;
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  if (codec == nullptr) {
    return unimplemented(std::string("no decoder for the codec ") +
                         avcodec_get_name(par->codec_id));
  }
  avcodec_free_context(&decoder_);
  decoder_ = avcodec_alloc_context3(codec);
  if (decoder_ == nullptr) return internal_error("out of memory");
  int err = avcodec_parameters_to_context(decoder_, par);
  if (err < 0) return invalid_argument("bad codec parameters: " + av_error_text(err));
  decoder_->thread_count = threads;
  decoder_->pkt_timebase = format_->streams[index]->time_base;
  AVDictionary* options = nullptr;
  av_dict_set(&options, "codec_whitelist", kVideoDecoders, 0);
  err = avcodec_open2(decoder_, codec, &options);
  av_dict_free(&options);
  if (err < 0) {
    return unimplemented(std::string("cannot open the ") + codec->name +
                         " decoder: " + av_error_text(err));
  }
  return decoder_;
}

VideoInput::~VideoInput() {
  avcodec_free_context(&decoder_);
  avformat_close_input(&format_);
  if (reader_ && reader_->io != nullptr) {
    // avio may have replaced the buffer it was given; free the one it holds now.
    av_freep(&reader_->io->buffer);
    avio_context_free(&reader_->io);
  }
}

}  // namespace qs::vision
