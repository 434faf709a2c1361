// audio: sound clips into a prompt (see audio_prompt.h).
#include "audio/audio_prompt.h"

#include <filesystem>

#include "audio/log_mel.h"
#include "audio/qwen2_5_omni_audio.h"
#include "audio/sound_file.h"
#include "core/content_hash.h"

namespace qs::audio {

Result<AudioPromptConfig> load_audio_prompt_config(const std::string& dir,
                                                   const models::ModelConfig& config) {
  if (config.audio_token_id < 0) {
    return invalid_argument(dir + ": config.json names no audio token (not an audio model)");
  }
  AudioPromptConfig out;
  out.audio_token_id = config.audio_token_id;
  out.audio_start_token_id = config.audio_start_token_id;
  out.audio_end_token_id = config.audio_end_token_id;
  const std::filesystem::path root(dir);
  std::error_code ec;
  if (std::filesystem::exists(root / "preprocessor_config.json", ec)) {
    QS_ASSIGN_OR_RETURN(out.features, load_log_mel_config(dir));
  } else {
    // Qwen2.5-Omni's WhisperFeatureExtractor: 128 bins over clips of up to 300 s.
    out.features.n_mels = 128;
    out.features.chunk_length = 300;
    out.features.n_samples = out.features.chunk_length * out.features.sample_rate;
    out.features.nb_max_frames = out.features.n_samples / out.features.hop_length;
  }
  return out;
}

Result<PromptAudio> prepare_prompt_audio(std::string_view bytes, const std::string& name,
                                         const AudioPromptConfig& config) {
  ReadOptions options;
  options.target_rate = config.features.sample_rate;
  options.max_seconds = static_cast<double>(config.features.n_samples) /
                        static_cast<double>(config.features.sample_rate);
  QS_ASSIGN_OR_RETURN(Sound sound, read_sound_bytes(bytes, name, options));
  Result<LogMel> mel = whisper_features_masked(sound.samples, config.features);
  if (!mel.ok()) return mel.status().with_context(name);
  PromptAudio out;
  out.frames = mel->n_frames;
  out.n_tokens = omni_audio_tokens(out.frames);
  out.seconds = static_cast<double>(sound.samples.size()) / static_cast<double>(sound.sample_rate);
  if (out.n_tokens < 1) {
    return invalid_argument(name + ": " + std::to_string(sound.samples.size()) +
                            " samples are too short a clip for one audio embedding");
  }
  out.features = std::make_shared<const std::vector<float>>(std::move(mel->values));
  out.hash = content_hash(bytes);
  return out;
}

models::PlaceholderItem audio_placeholder(const PromptAudio& clip,
                                          const AudioPromptConfig& config) {
  models::PlaceholderItem p;
  p.token_id = config.audio_token_id;
  p.n_tokens = clip.n_tokens;
  p.item.audio = true;
  p.item.frames = clip.frames;
  p.item.features = clip.features;
  p.item.hash = clip.hash;
  return p;
}

}  // namespace qs::audio
