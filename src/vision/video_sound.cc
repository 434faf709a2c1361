// vision: a video with its sound track (see video_sound.h).
#include "vision/video_sound.h"

#include "audio/log_mel.h"
#include "audio/qwen2_5_omni_audio.h"
#include "models/mrope.h"
#include "vision/video_file.h"

namespace qs::vision {

Result<models::PlaceholderItem> video_with_sound_placeholder(
    const PromptVideo& video, std::string_view bytes, const std::string& name,
    const VideoPromptConfig& config, const audio::AudioPromptConfig& clips) {
  const double max_seconds = static_cast<double>(clips.features.n_samples) /
                             static_cast<double>(clips.features.sample_rate);
  QS_ASSIGN_OR_RETURN(std::vector<float> sound,
                      read_video_audio_bytes(
                          bytes, name, static_cast<int>(clips.features.sample_rate), max_seconds));
  Result<audio::LogMel> mel = audio::whisper_features_masked(sound, clips.features);
  if (!mel.ok()) return mel.status().with_context(name + "'s sound track");
  const int64_t audio_tokens = audio::omni_audio_tokens(mel->n_frames);
  if (audio_tokens < 1) {
    return invalid_argument(name + ": its sound track is too short for one audio embedding");
  }
  QS_ASSIGN_OR_RETURN(std::vector<models::AvChunk> chunks,
                      models::audio_in_video_chunks(config.model, video.grid, audio_tokens));
  models::PlaceholderItem p = video_placeholder(video, config);
  p.item.frames = mel->n_frames;
  p.item.features = std::make_shared<const std::vector<float>>(std::move(mel->values));
  p.tokens.push_back(clips.audio_start_token_id);
  for (const models::AvChunk& c : chunks) {
    p.tokens.insert(p.tokens.end(), static_cast<size_t>(c.video), config.video_token_id);
    p.tokens.insert(p.tokens.end(), static_cast<size_t>(c.audio), clips.audio_token_id);
  }
  p.tokens.push_back(clips.audio_end_token_id);
  p.lead = 1;
  return p;
}

}  // namespace qs::vision
