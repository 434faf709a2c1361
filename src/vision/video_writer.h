// vision: generated RGB frames out, as an H.264 MP4 (Debian's FFmpeg: libswscale converts,
// libx264 encodes, libavformat's mp4 muxer writes with the moov atom first so the bytes can be
// streamed) or as numbered PNG files. Colour: RGB is taken as sRGB/BT.709 and converted to
// limited-range BT.709 yuv420p, and the stream is tagged so (matrix, primaries, transfer and
// range in the H.264 VUI), so players and our own reader (video_file.h) convert back with the
// same matrix. diffusers' export_to_video (imageio-ffmpeg) instead writes untagged yuv420p with
// swscale's default BT.601 matrix, which players guess at (often BT.709 for HD, a colour shift).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace qs::vision {

struct VideoWriteOptions {
  // Frames per second: frame i is shown at i / fps seconds (time base 1/fps, pts i). Wan2.2's
  // A14B models make 16 fps video, its TI2V-5B 24 fps. 1 to 240.
  int fps = 16;
  // libx264's constant rate factor, 0 (best) to 51 (smallest); 18 is visually near lossless.
  // 0 is lossless (of the yuv420p frames, not of the RGB) and selects the High 4:4:4
  // Predictive profile, which browsers do not play.
  int crf = 18;
  // libx264's speed/size trade-off: ultrafast, superfast, veryfast, faster, fast, medium, slow,
  // slower, veryslow or placebo.
  std::string preset = "medium";
  int threads = 0;  // encoder threads; 0 lets libx264 choose
};

// rgb: [n_frames, height, width, 3] 8-bit RGB. Returns the MP4 file's bytes. yuv420p halves
// the chroma both ways, so width and height must be even (Wan's sizes are multiples of 16);
// odd sizes are refused rather than silently resized, as export_to_video would.
Result<std::string> encode_mp4(const uint8_t* rgb, int64_t n_frames, int64_t height, int64_t width,
                               const VideoWriteOptions& options = {});

// encode_mp4 written to `path` through a temporary file beside it renamed into place: a failed
// encode or write leaves no file (and replaces none).
Status write_mp4(const std::string& path, const uint8_t* rgb, int64_t n_frames, int64_t height,
                 int64_t width, const VideoWriteOptions& options = {});

// Each frame as dir/frame_0000.png, frame_0001.png, ... (diffusion's PNG writer; more digits
// when n_frames needs them, so that the names still sort in frame order). Creates `dir` and
// its parents when missing.
Status write_png_frames(const std::string& dir, const uint8_t* rgb, int64_t n_frames,
                        int64_t height, int64_t width);

}  // namespace qs::vision
