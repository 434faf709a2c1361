// vision: videos into a prompt for Qwen2.5-VL and Qwen2.5-Omni, beside image_prompt.h. A
// video's bytes become its sampled frames' patches, grid (with the seconds each temporal patch
// spans, which M-RoPE's time axis reads) and placeholder count; models::expand_placeholders
// widens each <|video_pad|> the chat template wrote into grid.t * h * w / merge^2 copies.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "models/model_config.h"
#include "models/multimodal.h"
#include "models/placeholders.h"
#include "vision/qwen2_vl_video_processor.h"
#include "vision/video_file.h"

namespace qs::vision {

// What a checkpoint says about its video inputs.
// How a temporal patch's length in seconds (VisionGrid::seconds_per_t) is computed.
enum class SecondsPerPatch {
  // Qwen2_5_VLProcessor: temporal_patch_size / the sampled frame rate (frames kept over
  // frames in the video, times the video's rate).
  kSampledRate,
  // Qwen2_5OmniProcessor: temporal_patch_size / the fps asked for (2 when none was).
  kRequestedFps,
};

struct VideoPromptConfig {
  int32_t video_token_id = -1;  // <|video_pad|>: one per video before expansion
  Qwen2VLVideoConfig processor;
  // The processor's rule: kRequestedFps for a Qwen2.5-Omni thinker (a config with an audio
  // token), kSampledRate for Qwen2.5-VL.
  SecondsPerPatch seconds = SecondsPerPatch::kSampledRate;
  // The model's config: TMRoPE's clock, which lays out a video's sound track (video_sound.h).
  models::ModelConfig model;
};

// The id from config.json and the processor as load_qwen2_vl_video_config finds it.
Result<VideoPromptConfig> load_video_prompt_config(const std::string& dir,
                                                   const models::ModelConfig& config);

struct VideoPromptOptions {
  // Frames sampled per second, as Qwen2.5-VL's and Omni's chat templates ask (fps = 2);
  // nullopt leaves sampling to the processor config (its class samples nothing: every frame).
  std::optional<double> fps = 2.0;
  SecondsPerPatch seconds = SecondsPerPatch::kSampledRate;
  VideoReadOptions read;
};

// One video, processed and ready to go into a prompt.
struct PromptVideo {
  models::VisionGrid grid;                           // patches along t, h, w; seconds_per_t
  std::shared_ptr<const std::vector<float>> pixels;  // [t * h * w, patch values]
  int64_t n_tokens = 0;                              // placeholders after expansion
  uint64_t hash = 0;                                 // of the source bytes, never 0
  int64_t width = 0, height = 0;                     // as decoded
  double fps = 0.0;                                  // the video's frame rate
  double duration_seconds = 0.0;                     // n_frames / fps
  int64_t n_frames = 0;                              // in the video
  std::vector<int64_t> frame_indices;                // the frames sampled
  std::vector<double> frame_seconds;                 // their timestamps
  bool has_audio = false;                            // read_video_audio_bytes can hear it
};

// Decodes `bytes` (`name` names it in errors), samples and processes the frames. Limits of
// options.read are checked before decoding; sizes the processor refuses are errors naming it.
Result<PromptVideo> prepare_prompt_video(std::string_view bytes, const std::string& name,
                                         const Qwen2VLVideoConfig& config,
                                         const VideoPromptOptions& options = {});

// The video as an item (video = true) waiting for its placeholder
// (models::expand_placeholders).
models::PlaceholderItem video_placeholder(const PromptVideo& video,
                                          const VideoPromptConfig& config);

}  // namespace qs::vision
