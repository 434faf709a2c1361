// audio: Qwen2.5-Omni's audio tower (transformers' Qwen2_5OmniAudioEncoder), the ears of the
// Omni thinker: Whisper's encoder layers over log-mel frames (128 bins) cut into chunks of
// 2 x n_window frames, each chunk convolved (3-wide conv1d, GELU, stride-2 conv1d, GELU) and
// given sinusoidal positions from 0 on its own, attention only inside each chunk, then pairs of
// rows averaged, a LayerNorm and a projection to the decoder's width. A clip of L frames gives
// ((L - 1) / 2 + 1 - 2) / 2 + 1 embeddings, one per <|AUDIO|> placeholder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "audio/whisper_model.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "models/component.h"
#include "models/multimodal.h"
#include "ops/linear.h"

namespace qs::audio {

// The placeholders (and embeddings) of a clip of `frames` log-mel frames: the stride-2
// convolution halves them, the pooling halves them again (the processor's
// _get_feat_extract_output_lengths).
inline int64_t omni_audio_tokens(int64_t frames) {
  if (frames < 3) return 0;
  const int64_t after_conv = (frames - 1) / 2 + 1;
  return (after_conv - 2) / 2 + 1;
}

struct OmniAudioConfig {
  int64_t num_mel_bins = 128, d_model = 1280, encoder_layers = 32, encoder_attention_heads = 20;
  int64_t encoder_ffn_dim = 5120, n_window = 100, output_dim = 3584;
  int64_t max_source_positions = 1500;
};

class Qwen25OmniAudioTower : public models::AudioEncoder {
 public:
  // The tower of the checkpoint in `dir` (config.json's audio_config, tensors under
  // "audio_tower.").
  static Result<Qwen25OmniAudioTower> load(const std::string& dir);
  const OmniAudioConfig& config() const { return config_; }

  int64_t n_mels() const override { return config_.num_mel_bins; }
  int64_t out_width() const override { return config_.output_dim; }
  int64_t tokens(int64_t frames) const override { return omni_audio_tokens(frames); }
  // features [n_mels, frames] -> out [tokens(frames), output_dim].
  Status encode(const float* features, int64_t frames, std::vector<float>* out,
                ThreadPool& pool) const override;

 private:
  OmniAudioConfig config_;
  models::Component weights_;
  std::vector<float> conv1_w_, conv1_b_, conv2_w_, conv2_b_;
  std::vector<float> positions_;  // [max_source_positions, d_model] sinusoids
  std::vector<WhisperLayer> layers_;
  std::vector<float> ln_post_w_, ln_post_b_;
  ops::LinearWeight proj_;
  std::vector<float> proj_b_;
};

}  // namespace qs::audio
