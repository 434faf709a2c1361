// audio: sound clips into a prompt for Qwen2.5-Omni's thinker, shared by the server's chat
// endpoint and `generate --audio`. A clip's bytes become 16 kHz mono samples (sound_file.h),
// the log-mel frames the processor's WhisperFeatureExtractor keeps for it
// (whisper_features_masked), and its <|AUDIO|> count; the chat template writes one
// <|AUDIO|> per clip, which models::expand_placeholders then widens to that count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "audio/log_mel_config.h"
#include "core/status.h"
#include "models/model_config.h"
#include "models/placeholders.h"

namespace qs::audio {

// What a checkpoint says about its audio inputs.
struct AudioPromptConfig {
  int32_t audio_token_id = -1;        // <|AUDIO|>: one per clip before expansion
  int32_t audio_start_token_id = -1;  // <|audio_bos|>
  int32_t audio_end_token_id = -1;    // <|audio_eos|>
  LogMelConfig features;              // 128 mel bins, clips up to 300 s for Qwen2.5-Omni
};

// The ids from the model's config.json and the feature extractor from preprocessor_config.json
// (Qwen2.5-Omni's when the file is absent).
Result<AudioPromptConfig> load_audio_prompt_config(const std::string& dir,
                                                   const models::ModelConfig& config);

// One clip, ready to go into a prompt.
struct PromptAudio {
  int64_t frames = 0;                                  // log-mel frames the tower reads
  std::shared_ptr<const std::vector<float>> features;  // [n_mels, frames]
  int64_t n_tokens = 0;                                // <|AUDIO|> placeholders after expansion
  uint64_t hash = 0;                                   // of the source bytes, never 0
  double seconds = 0;                                  // as decoded
};

// Decodes `bytes` (any format libsndfile reads; `name` names it in errors), resamples it to the
// feature extractor's rate and computes its frames. A clip longer than the feature extractor
// takes (transformers would cut it silently) is refused from its header, as is one too short to
// give a single embedding.
Result<PromptAudio> prepare_prompt_audio(std::string_view bytes, const std::string& name,
                                         const AudioPromptConfig& config);

// The clip as an item waiting for its placeholder (models::expand_placeholders).
models::PlaceholderItem audio_placeholder(const PromptAudio& clip, const AudioPromptConfig& config);

}  // namespace qs::audio
