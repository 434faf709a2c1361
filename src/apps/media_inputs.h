// apps: what `serve` and `generate` load beside a multimodal checkpoint's decoder: the towers
// the engine runs (EngineConfig::vision, ::audio) and the placeholders and processors that
// prompts are built with; and serve's --limit-mm-per-prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "audio/audio_prompt.h"
#include "audio/qwen2_5_omni_audio.h"
#include "core/status.h"
#include "models/model_config.h"
#include "server/openai_request.h"
#include "vision/image_prompt.h"
#include "vision/qwen2_5_vl_vision.h"
#include "vision/video_prompt.h"

namespace qs::apps {

struct MediaInputs {
  std::unique_ptr<vision::Qwen25VisionTower> vision;  // null: no vision tower
  std::unique_ptr<vision::ImagePromptConfig> images;
  std::unique_ptr<vision::VideoPromptConfig> videos;   // with the vision tower, when named
  std::unique_ptr<audio::Qwen25OmniAudioTower> audio;  // null: no audio tower
  std::unique_ptr<audio::AudioPromptConfig> clips;
};

// A config.json that names an image token (Qwen2.5-VL, Qwen2.5-Omni) loads the vision tower and
// image inputs (and video inputs when it names a video token), one that names an audio token
// (Qwen2.5-Omni) the audio tower and clip inputs.
Result<MediaInputs> load_media_inputs(const std::string& dir, const models::ModelConfig& config);

// vLLM's --limit-mm-per-prompt: a JSON object of modality -> count ('{"image": 4, "video": 1}')
// over *options' defaults.
Status media_limits_from_flag(const std::string& text, server::MediaOptions* options);

}  // namespace qs::apps
