// audio: Whisper's log-mel spectrogram, equal (within 1e-4) to transformers'
// WhisperFeatureExtractor and faster-whisper's FeatureExtractor: a periodic Hann window,
// centred frames with reflect padding, |STFT|^2 in f64 through FFTW with the last frame
// dropped, librosa's Slaney mel filter bank, log10, a floor 8 below the maximum, (x + 4) / 4.
// docs/audio.md holds the measured differences.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "audio/log_mel_config.h"
#include "core/status.h"

namespace qs::audio {

// librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False, norm="slaney"): triangles on
// the Slaney mel scale (linear below 1 kHz, logarithmic above), each scaled to unit area.
struct MelFilterBank {
  int64_t n_mels = 0;
  int64_t n_bins = 0;           // n_fft / 2 + 1
  std::vector<double> weights;  // [n_mels, n_bins]
  std::vector<int64_t> first;   // [n_mels] first nonzero bin of each row
  std::vector<int64_t> end;     // [n_mels] one past its last (first == end: an empty row)
};
MelFilterBank mel_filter_bank(int64_t sample_rate, int64_t n_fft, int64_t n_mels, double f_min,
                              double f_max);

struct LogMel {
  int64_t n_mels = 0;
  int64_t n_frames = 0;
  std::vector<float> values;  // [n_mels, n_frames]
};

// The features of exactly `samples` (no padding added beyond the centring): one frame per
// hop_length samples, (n + 2 * (n_fft / 2) - n_fft) / hop_length of them. The floor is taken
// against the maximum of everything computed here.
Result<LogMel> log_mel_spectrogram(std::span<const float> samples, const LogMelConfig& config);

// WhisperFeatureExtractor(samples) for one clip: zero-padded or cut to config.n_samples,
// config.nb_max_frames frames.
Result<LogMel> whisper_features_hf(std::span<const float> samples, const LogMelConfig& config = {});

// WhisperFeatureExtractor(samples, padding="max_length", return_attention_mask=True) with only
// the frames its attention mask keeps, ceil(samples / hop_length) of them: what Qwen2.5-Omni's
// processor hands its audio tower for a clip of up to config.n_samples (longer ones are cut
// there, as transformers cuts them). Only the frames that reach the clip are computed: the
// padding's zeros take the smallest log-mel value there is, so they never move the floor.
Result<LogMel> whisper_features_masked(std::span<const float> samples,
                                       const LogMelConfig& config = {});

// faster-whisper's FeatureExtractor(samples, padding): `padding` zeros appended, the whole
// audio's frames (n_samples / hop_length + 1 for the default padding); the transcription loop
// slices nb_max_frames windows out of it.
Result<LogMel> whisper_features_whole(std::span<const float> samples, int64_t padding = 160,
                                      const LogMelConfig& config = {});

}  // namespace qs::audio
