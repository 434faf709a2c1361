// fuzz: an uploaded video's bytes as vision::prepare_prompt_video reads them (libavformat
// over the buffer, limited to the video containers and codecs of video_input.cc, a demux-only
// scan, the decode of the sampled frames, swscale to RGB), then Qwen2-VL's video processor, and
// the audio track as read_video_audio_bytes resamples it. What is accepted must be whole frames
// within the limits and patches the grid's count, all finite. FFmpeg is Debian's and not
// instrumented, so coverage guides through our side only.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "vision/video_file.h"
#include "vision/video_prompt.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Small limits keep each run short: a few bytes of a container can claim hours of frames.
  qs::vision::VideoPromptOptions options;
  options.read.max_pixels = 1 << 18;
  options.read.max_frames = 2000;
  options.read.max_seconds = 600;
  options.read.max_rgb_bytes = 64 << 20;
  options.read.threads = 1;
  qs::vision::Qwen2VLVideoConfig config;
  config.image.min_pixels = 28 * 28;
  config.image.max_pixels = 28 * 28 * 16;
  config.max_frames = 16;
  auto video = qs::vision::prepare_prompt_video(bytes, "upload", config, options);
  if (video.ok()) {
    QS_CHECK(video->width > 0 && video->height > 0 &&
             video->width * video->height <= options.read.max_pixels);
    QS_CHECK(video->n_frames > 0 && video->n_frames <= options.read.max_frames);
    QS_CHECK(!video->frame_indices.empty() && video->frame_indices.back() < video->n_frames);
    QS_CHECK(video->frame_seconds.size() == video->frame_indices.size());
    const int64_t patches = video->grid.t * video->grid.h * video->grid.w;
    QS_CHECK(static_cast<int64_t>(video->pixels->size()) == patches * 3 * 2 * 14 * 14);
    QS_CHECK(video->n_tokens * 4 == patches);
    QS_CHECK(std::isfinite(video->grid.seconds_per_t) && video->grid.seconds_per_t > 0);
    for (float v : *video->pixels) QS_CHECK(std::isfinite(v));
  }
  auto pcm = qs::vision::read_video_audio_bytes(bytes, "upload", 16000, 600);
  if (pcm.ok()) {
    QS_CHECK(pcm->size() <= static_cast<size_t>(600 * 16000) + 16000);
    for (float v : *pcm) QS_CHECK(std::isfinite(v));
  }
  return 0;
}
