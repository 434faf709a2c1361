// vision: videos into a prompt (see video_prompt.h).
#include "vision/video_prompt.h"

#include "core/content_hash.h"

#include <cmath>

#include "vision/image_prompt.h"

namespace qs::vision {

Result<VideoPromptConfig> load_video_prompt_config(const std::string& dir,
                                                   const models::ModelConfig& config) {
  if (config.video_token_id < 0) {
    return invalid_argument(dir + ": config.json names no video_token_id (not a video model)");
  }
  VideoPromptConfig out;
  out.video_token_id = config.video_token_id;
  out.model = config;
  QS_ASSIGN_OR_RETURN(out.processor, load_qwen2_vl_video_config(dir));
  if (config.audio_token_id >= 0) {
    // Qwen2_5OmniProcessor: its own video size (128 to 768 tokens of 28 x 28 pixels a frame)
    // overrides the checkpoint's, and a temporal patch lasts temporal_patch_size / fps.
    out.processor.image.min_pixels = 128 * 28 * 28;
    out.processor.image.max_pixels = 768 * 28 * 28;
    out.seconds = SecondsPerPatch::kRequestedFps;
  }
  return out;
}

Result<PromptVideo> prepare_prompt_video(std::string_view bytes, const std::string& name,
                                         const Qwen2VLVideoConfig& config,
                                         const VideoPromptOptions& options) {
  Qwen2VLVideoConfig cfg = config;
  if (options.fps) {
    if (!(*options.fps > 0) || !std::isfinite(*options.fps)) {
      return invalid_argument(name + ": fps must be a positive number, not " +
                              std::to_string(*options.fps));
    }
    cfg.do_sample_frames = true;
    cfg.fps = options.fps;
    cfg.num_frames.reset();
  }
  const VideoFramePicker pick = [&cfg](const VideoInfo& info) {
    return qwen2_vl_sample_frames(info.n_frames, info.fps, cfg);
  };
  QS_ASSIGN_OR_RETURN(VideoFrames video, read_video_bytes(bytes, name, pick, options.read));
  const auto n_kept = static_cast<int64_t>(video.indices.size());
  Result<VideoPatches> patches =
      qwen2_vl_preprocess_video(video.pixels, n_kept, video.info.width, video.info.height, cfg);
  if (!patches.ok()) return patches.status().with_context(name);
  PromptVideo out;
  out.grid = {patches->grid_thw[0], patches->grid_thw[1], patches->grid_thw[2]};
  const auto tps = static_cast<double>(cfg.image.temporal_patch_size);
  if (options.seconds == SecondsPerPatch::kRequestedFps) {
    out.grid.seconds_per_t = tps / (cfg.do_sample_frames && cfg.fps ? *cfg.fps : 2.0);
  } else {
    // VideoMetadata.sampled_fps: kept / total * fps (the video's own rate when every frame
    // is kept).
    const double sampled_fps =
        static_cast<double>(n_kept) / static_cast<double>(video.info.n_frames) * video.info.fps;
    out.grid.seconds_per_t = tps / sampled_fps;
  }
  out.n_tokens = patches->n_tokens;
  out.pixels = std::make_shared<const std::vector<float>>(std::move(patches->pixel_values));
  out.hash = content_hash(bytes);
  out.width = video.info.width;
  out.height = video.info.height;
  out.fps = video.info.fps;
  out.duration_seconds = video.info.duration_seconds;
  out.n_frames = video.info.n_frames;
  out.frame_indices = std::move(video.indices);
  out.frame_seconds = std::move(video.seconds);
  out.has_audio = video.info.has_audio;
  return out;
}

models::PlaceholderItem video_placeholder(const PromptVideo& video,
                                          const VideoPromptConfig& config) {
  models::PlaceholderItem p;
  p.token_id = config.video_token_id;
  p.n_tokens = video.n_tokens;
  p.item.video = true;
  p.item.grid = video.grid;
  p.item.pixels = video.pixels;
  p.item.hash = video.hash;
  return p;
}

}  // namespace qs::vision
