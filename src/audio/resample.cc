// audio: libsoxr's one-shot conversion (see resample.h).
#include "audio/resample.h"

#include <soxr.h>

#include <string>

namespace qs::audio {

Result<std::vector<float>> resample(std::span<const float> samples, int64_t from_rate,
                                    int64_t to_rate) {
  if (from_rate <= 0 || to_rate <= 0) {
    return invalid_argument("resample: rates must be positive, got " + std::to_string(from_rate) +
                            " Hz to " + std::to_string(to_rate) + " Hz");
  }
  if (from_rate == to_rate) return std::vector<float>(samples.begin(), samples.end());
  // soxr_oneshot sizes its output the same way: it consumes the whole input, flushes the
  // filter's tail and drops its delay.
  const double out_len = static_cast<double>(samples.size()) * static_cast<double>(to_rate) /
                             static_cast<double>(from_rate) +
                         0.5;
  std::vector<float> out(static_cast<size_t>(out_len));
  if (samples.empty() || out.empty()) return out;
  // soxr_oneshot's own default is SOXR_LQ, hence the explicit spec.
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  size_t produced = 0;
  const soxr_error_t error = soxr_oneshot(
      static_cast<double>(from_rate), static_cast<double>(to_rate), 1, samples.data(),
      samples.size(), nullptr, out.data(), out.size(), &produced, &io, &quality, nullptr);
  if (error) {
    return internal_error("resample " + std::to_string(from_rate) + " Hz to " +
                          std::to_string(to_rate) + " Hz: libsoxr: " + error);
  }
  out.resize(produced);
  return out;
}

}  // namespace qs::audio
