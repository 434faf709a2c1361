// vision: video files in, as the 8-bit RGB frames transformers' video processors start from.
// Debian's FFmpeg libraries demux (libavformat, from a path or from an upload's bytes in
// memory), decode (libavcodec) and convert (libswscale, as PyAV's to_ndarray("rgb24") does:
// bilinear flags, the frame's own colorspace and range). The size is checked from the codec
// parameters and the frame count and length from a demux-only scan, all before any frame is
// decoded; only the frames a caller picks are converted and kept.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs::vision {

struct VideoReadOptions {
  int64_t max_pixels = 7680 * 4320;  // width * height of a frame (8K), refused above
  int64_t max_frames = 100000;       // frames in the video stream, refused above
  double max_seconds = 3 * 3600.0;   // the stream's length, refused above
  // Bytes of RGB the picked frames may take (frames * width * height * 3), refused above.
  int64_t max_rgb_bytes = int64_t{2} << 30;
  int threads = 0;  // decoder threads; 0 lets FFmpeg choose
};

struct VideoInfo {
  int64_t width = 0, height = 0;
  // Packets of the video stream, counted by a demux-only scan: the frames a decode yields (as
  // torchcodec's exact mode counts them), also where a container stores no count.
  int64_t n_frames = 0;
  // The stream's average frame rate (PyAV's average_rate, which transformers' read_video_pyav
  // reports), else the scanned frames over the scanned span.
  double fps = 0.0;
  double duration_seconds = 0.0;  // n_frames / fps, as read_video_pyav reports it
  std::string container;          // the demuxer ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm")
  std::string codec;              // the video codec ("h264")
  bool has_audio = false;         // an audio stream the demuxer found
};

struct VideoFrames {
  VideoInfo info;
  std::vector<int64_t> indices;  // the frames kept, in presentation order
  std::vector<double> seconds;   // each kept frame's timestamp (pts times the time base)
  std::vector<uint8_t> pixels;   // [indices.size(), height, width, 3] RGB
};

// Picks the frames to keep once the video's size, count and rate are known: indices in
// [0, n_frames), ascending (repeats allowed). An error aborts the read with its message.
using VideoFramePicker = std::function<Result<std::vector<int64_t>>(const VideoInfo&)>;

// `name` names the bytes in messages (an upload's file name, "data: URL"). An empty picker
// keeps every frame.
Result<VideoInfo> probe_video_bytes(std::string_view bytes, const std::string& name,
                                    const VideoReadOptions& options = {});
Result<VideoFrames> read_video_bytes(std::string_view bytes, const std::string& name,
                                     const VideoFramePicker& pick = {},
                                     const VideoReadOptions& options = {});
Result<VideoFrames> read_video_file(const std::string& path, const VideoFramePicker& pick = {},
                                    const VideoReadOptions& options = {});

// The first audio track, decoded and resampled to `sample_rate` Hz mono float (libswresample's
// defaults, channels averaged), as Qwen2.5-Omni hears a video's sound. A video without audio
// is an error saying so; at most max_seconds of sound are read.
Result<std::vector<float>> read_video_audio_bytes(std::string_view bytes, const std::string& name,
                                                  int sample_rate = 16000,
                                                  double max_seconds = 3 * 3600.0);

}  // namespace qs::vision
