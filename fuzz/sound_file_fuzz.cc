// fuzz: an uploaded sound file's bytes as audio::read_sound_bytes reads them (libsndfile's
// virtual I/O, the header checks, downmix, libsoxr to 16 kHz), then the faster-whisper
// features of its first second. What is accepted must be finite mono samples in [-1, 1] at
// 16 kHz, as many as the decoded frames resample to. libsndfile and libsoxr are Debian's and
// not instrumented, so coverage guides through our side only.
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>

#include "audio/log_mel.h"
#include "audio/sound_file.h"
#include "core/check.h"

// libvorbis leaks its vorbis_info when a crafted Ogg stream fails to open (xiph/vorbis#125,
// open upstream; 5784 bytes per file, regressions/sound_file/ogg_vorbis_info_leak). It is not
// ours to fix, and reporting it would stop every run at the first such input.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:vorbis_info_init\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A few seconds keep each run short: a FLAC of silence packs minutes into a few bytes.
  const qs::audio::ReadOptions options{.target_rate = 16000, .max_seconds = 5.0};
  auto sound = qs::audio::read_sound_bytes(
      std::string_view(reinterpret_cast<const char*>(data), size), "upload", options);
  if (!sound.ok()) return 0;
  QS_CHECK(sound->sample_rate == 16000 && sound->source_frames > 0);
  QS_CHECK(sound->source_channels >= 1 && sound->source_channels <= qs::audio::kMaxChannels);
  const double expected =
      static_cast<double>(sound->source_frames) * 16000.0 / static_cast<double>(sound->source_rate);
  QS_CHECK(std::fabs(static_cast<double>(sound->samples.size()) - expected) <= 1.0);
  for (float s : sound->samples) QS_CHECK(std::isfinite(s) && s >= -1.0f && s <= 1.0f);
  const size_t n = std::min<size_t>(sound->samples.size(), 16000);
  auto features = qs::audio::whisper_features_whole(std::span(sound->samples).first(n));
  QS_CHECK(features.ok());
  QS_CHECK(features->n_frames == static_cast<int64_t>(n) / 160 + 1);
  for (float v : features->values) QS_CHECK(std::isfinite(v));
  return 0;
}
