// audio: sample-rate conversion of mono f32 through libsoxr at its "high quality" recipe
// (SOXR_HQ: 20-bit precision, 91% passband, linear phase), the quality python-soxr and
// librosa's default resampler use.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace qs::audio {

// round(n * to_rate / from_rate) samples, aligned with the input (soxr's delay removed). Equal
// rates return the input unchanged, bit for bit.
Result<std::vector<float>> resample(std::span<const float> samples, int64_t from_rate,
                                    int64_t to_rate);

}  // namespace qs::audio
