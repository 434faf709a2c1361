// audio: preprocessor_config.json into a LogMelConfig (see log_mel_config.h).
#include "audio/log_mel_config.h"

#include <filesystem>
#include <optional>

#include "audio/sound_file.h"
#include "core/json.h"

namespace qs::audio {
using nlohmann::json;

Status validate_log_mel_config(const LogMelConfig& c, const std::string& source) {
  // Far above Whisper's 128 bins, 400-point FFT and 30 s windows, far below sizes whose
  // arithmetic or allocations could fail.
  QS_RETURN_IF_ERROR(json_check_range(c.n_mels, 1, 1024, "feature_size", source));
  QS_RETURN_IF_ERROR(
      json_check_range(c.sample_rate, kMinSampleRate, kMaxSampleRate, "sampling_rate", source));
  QS_RETURN_IF_ERROR(json_check_range(c.n_fft, 2, 1 << 16, "n_fft", source));
  QS_RETURN_IF_ERROR(json_check_range(c.hop_length, 1, 1 << 16, "hop_length", source));
  QS_RETURN_IF_ERROR(json_check_range(c.chunk_length, 1, 3600, "chunk_length", source));
  if (c.n_samples != c.chunk_length * c.sample_rate) {
    return invalid_argument(source + ": 'n_samples' is " + std::to_string(c.n_samples) +
                            ", but chunk_length * sampling_rate is " +
                            std::to_string(c.chunk_length * c.sample_rate));
  }
  if (c.nb_max_frames != c.n_samples / c.hop_length) {
    return invalid_argument(source + ": 'nb_max_frames' is " + std::to_string(c.nb_max_frames) +
                            ", but n_samples / hop_length is " +
                            std::to_string(c.n_samples / c.hop_length));
  }
  return ok_status();
}

Result<LogMelConfig> parse_log_mel_config(const json& value, const std::string& source) {
  if (!value.is_object()) {
    return invalid_argument(source + ": expected a JSON object, found " +
                            std::string(value.type_name()));
  }
  LogMelConfig c;
  const std::pair<const char*, int64_t*> fields[] = {{"feature_size", &c.n_mels},
                                                     {"sampling_rate", &c.sample_rate},
                                                     {"hop_length", &c.hop_length},
                                                     {"n_fft", &c.n_fft},
                                                     {"chunk_length", &c.chunk_length}};
  for (const auto& [field, out] : fields) {
    QS_ASSIGN_OR_RETURN(std::optional<int64_t> v, json_integral(value, field, source));
    if (v) *out = *v;
  }
  QS_RETURN_IF_ERROR(
      json_check_range(c.sample_rate, kMinSampleRate, kMaxSampleRate, "sampling_rate", source));
  QS_RETURN_IF_ERROR(json_check_range(c.hop_length, 1, 1 << 16, "hop_length", source));
  QS_RETURN_IF_ERROR(json_check_range(c.chunk_length, 1, 3600, "chunk_length", source));
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> n_samples, json_integral(value, "n_samples", source));
  c.n_samples = n_samples.value_or(c.chunk_length * c.sample_rate);
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> nb_max_frames,
                      json_integral(value, "nb_max_frames", source));
  c.nb_max_frames = nb_max_frames.value_or(c.n_samples / c.hop_length);
  QS_RETURN_IF_ERROR(validate_log_mel_config(c, source));
  return c;
}

Result<LogMelConfig> load_log_mel_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "preprocessor_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return LogMelConfig{};
  QS_ASSIGN_OR_RETURN(json value, read_json(path));
  return parse_log_mel_config(value, path);
}

}  // namespace qs::audio
