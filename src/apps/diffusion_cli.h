// apps: what generate-image and generate-video share: the initial noise read from a
// .safetensors file (how a diffusers run is reproduced from its `latents`) and the median of
// the step times they print.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace qs::apps {

// The tensor "noise" of `path` (or its only tensor) as f32: a float tensor of rank `rank`, or
// `rank + 1` with a leading 1 (diffusers' batch of one); `layout` names the shape in the error
// ("[n_img, channels]").
Result<std::vector<float>> read_noise_file(const std::string& path, int rank,
                                           const std::string& layout);

double median(std::vector<double> v);

}  // namespace qs::apps
