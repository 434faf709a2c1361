// vision: an FFmpeg demuxer opened on a video file's path or on an upload's bytes (an
// AVIOContext reading the buffer in place), with the demuxers and decoders it may use limited
// to the common video containers and codecs, and everything freed on every path. Internal to
// the room: callers read videos through video_file.h.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

struct AVFormatContext;
struct AVCodecContext;

namespace qs::vision {

// FFmpeg's text for an error code ("Invalid data found when processing input").
std::string av_error_text(int err);

// Where the bytes come from: a path (read by FFmpeg's file protocol only) or a buffer that
// must outlive the VideoInput.
struct VideoSource {
  std::string path;        // used when bytes is empty
  std::string_view bytes;  // an upload or a data: URL's payload
  std::string name;        // names the video in errors
};

class VideoInput {
 public:
  // Opens and probes the container (avformat_find_stream_info); a format outside the list
  // of video containers is refused as "not a video".
  static Result<std::unique_ptr<VideoInput>> open(const VideoSource& source);
  ~VideoInput();
  VideoInput(const VideoInput&) = delete;
  VideoInput& operator=(const VideoInput&) = delete;

  AVFormatContext* format() const { return format_; }
  // A decoder for stream `index` (its parameters copied in); `threads` 0 lets FFmpeg decide.
  Result<AVCodecContext*> open_decoder(int index, int threads);

 private:
  VideoInput() = default;
  struct MemoryReader;
  AVFormatContext* format_ = nullptr;
  AVCodecContext* decoder_ = nullptr;
  std::unique_ptr<MemoryReader> reader_;
};

}  // namespace qs::vision
