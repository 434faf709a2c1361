// audio: sound files in, as mono f32 at the rate a model wants. libsndfile reads the container
// (WAV, FLAC, OGG/Vorbis, MP3, AIFF, ...) from a path or from the bytes of an upload, the
// channels are averaged and libsoxr resamples. Rate, channels and duration are checked from
// the header before anything is decoded, so a hostile upload costs no more than its header.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs::audio {

// Rates outside this range are no recording anyone sends (telephony is 8 kHz, studio masters
// 192 kHz, DXD 352.8 kHz); a header claiming one is corrupt or hostile.
inline constexpr int64_t kMinSampleRate = 1000;
inline constexpr int64_t kMaxSampleRate = 384000;
// Third-order ambisonics has 16 channels, 22.2 surround 24; libsndfile itself allows 1024.
inline constexpr int kMaxChannels = 64;
// ReadOptions::target_rate that keeps the file's own rate.
inline constexpr int64_t kKeepRate = 0;

struct ReadOptions {
  int64_t target_rate = 16000;  // Whisper's; kKeepRate leaves the samples unresampled
  double max_seconds = 3600.0;  // longer files are refused from their header
};

struct Sound {
  std::vector<float> samples;  // [n_samples] mono, in [-1, 1]
  int64_t sample_rate = 0;     // of `samples`
  int64_t source_rate = 0;     // the file's
  int source_channels = 0;
  int64_t source_frames = 0;  // decoded, at the file's rate
};

// `name` names the bytes in messages (an upload's file name).
Result<Sound> read_sound_file(const std::string& path, const ReadOptions& options = {});
Result<Sound> read_sound_bytes(std::string_view bytes, const std::string& name,
                               const ReadOptions& options = {});

}  // namespace qs::audio
