// audio: the log-mel front end's settings, as a Whisper checkpoint's preprocessor_config.json
// (transformers' WhisperFeatureExtractor) states them. Whisper large-v3 and its descendants
// use 128 mel bins, every earlier Whisper 80; the rest is shared.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::audio {

struct LogMelConfig {
  int64_t n_mels = 80;           // "feature_size"
  int64_t sample_rate = 16000;   // "sampling_rate"
  int64_t hop_length = 160;      // samples between frames (10 ms)
  int64_t n_fft = 400;           // window and FFT length (25 ms)
  int64_t chunk_length = 30;     // seconds in one window of the encoder
  int64_t n_samples = 480000;    // chunk_length * sample_rate
  int64_t nb_max_frames = 3000;  // n_samples / hop_length
};

// Every field in range and the derived ones consistent; `source` names the config in messages.
Status validate_log_mel_config(const LogMelConfig& config, const std::string& source);

// Missing fields take the defaults above (n_samples and nb_max_frames derived from the
// others); a field of the wrong type or out of range is an error naming it.
Result<LogMelConfig> parse_log_mel_config(const nlohmann::json& value, const std::string& source);

// `dir`/preprocessor_config.json, or the defaults when the directory has none.
Result<LogMelConfig> load_log_mel_config(const std::string& dir);

}  // namespace qs::audio
