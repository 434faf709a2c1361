// apps: a multimodal checkpoint's towers and inputs (see media_inputs.h).
#include "apps/media_inputs.h"

#include <nlohmann/json.hpp>

namespace qs::apps {

Result<MediaInputs> load_media_inputs(const std::string& dir, const models::ModelConfig& config) {
  MediaInputs out;
  if (config.image_token_id >= 0) {
    QS_ASSIGN_OR_RETURN(vision::Qwen25VisionTower tower, vision::Qwen25VisionTower::load(dir));
    QS_ASSIGN_OR_RETURN(vision::ImagePromptConfig images,
                        vision::load_image_prompt_config(dir, config));
    out.vision = std::make_unique<vision::Qwen25VisionTower>(std::move(tower));
    out.images = std::make_unique<vision::ImagePromptConfig>(std::move(images));
    if (config.video_token_id >= 0) {
      QS_ASSIGN_OR_RETURN(vision::VideoPromptConfig videos,
                          vision::load_video_prompt_config(dir, config));
      out.videos = std::make_unique<vision::VideoPromptConfig>(std::move(videos));
    }
  }
  if (config.audio_token_id >= 0) {
    QS_ASSIGN_OR_RETURN(audio::Qwen25OmniAudioTower tower, audio::Qwen25OmniAudioTower::load(dir));
    QS_ASSIGN_OR_RETURN(audio::AudioPromptConfig clips,
                        audio::load_audio_prompt_config(dir, config));
    if (clips.features.n_mels != tower.n_mels()) {
      return invalid_argument(
          dir + ": the feature extractor's " + std::to_string(clips.features.n_mels) +
          " mel bins are not the audio tower's " + std::to_string(tower.n_mels()));
    }
    out.audio = std::make_unique<audio::Qwen25OmniAudioTower>(std::move(tower));
    out.clips = std::make_unique<audio::AudioPromptConfig>(std::move(clips));
  }
  return out;
}

Status media_limits_from_flag(const std::string& text, server::MediaOptions* options) {
  const auto bad = [&](const std::string& why) {
    return invalid_argument(
        "--limit-mm-per-prompt expects a JSON object such as '{\"image\": 4}' (" + why +
        "), got '" + text + "'");
  };
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("not a JSON object");
  server::MediaOptions out = *options;
  for (const auto& [key, value] : j.items()) {
    if (key != "image" && key != "video" && key != "audio") return bad("unknown modality " + key);
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 1000000) {
      return bad("counts are integers from 0 to 1000000");
    }
    if (key == "image") out.max_images_per_prompt = value.get<int64_t>();
    if (key == "audio") out.max_audios_per_prompt = value.get<int64_t>();
    if (key == "video") out.max_videos_per_prompt = value.get<int64_t>();
  }
  *options = out;
  return ok_status();
}

}  // namespace qs::apps
