// vision: videos into a prompt (see video_prompt.h).
#include "vision/video_prompt.h"

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
  QS_ASSIGN_OR_RETURN(out.processor, load_qwen2_vl_video_config(dir));
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
  out.hash = image_source_hash(bytes);
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

Result<std::vector<models::MultimodalItem>> expand_video_placeholders(
    std::vector<int32_t>* ids, int32_t video_token_id, std::span<const PromptVideo> videos) {
  size_t n_placeholders = 0;
  for (const int32_t id : *ids) n_placeholders += id == video_token_id ? 1 : 0;
  if (n_placeholders != videos.size()) {
    return invalid_argument("the prompt has " + std::to_string(n_placeholders) +
                            " video placeholder(s) for " + std::to_string(videos.size()) +
                            " video(s)");
  }
  std::vector<models::MultimodalItem> items;
  if (videos.empty()) return items;
  size_t extra = 0;
  for (const PromptVideo& v : videos) extra += static_cast<size_t>(v.n_tokens);
  std::vector<int32_t> out;
  out.reserve(ids->size() + extra);
  size_t next = 0;
  for (const int32_t id : *ids) {
    if (id != video_token_id) {
      out.push_back(id);
      continue;
    }
    const PromptVideo& v = videos[next++];
    models::MultimodalItem item;
    item.video = true;
    item.offset = static_cast<int64_t>(out.size());
    item.grid = v.grid;
    item.pixels = v.pixels;
    item.hash = v.hash;
    items.push_back(std::move(item));
    out.insert(out.end(), static_cast<size_t>(v.n_tokens), video_token_id);
  }
  *ids = std::move(out);
  return items;
}

}  // namespace qs::vision
