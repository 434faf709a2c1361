// diffusion: 8-bit RGB PNG files through libpng, for the image pipeline's output and the
// test fixtures. Pixels are rounded as diffusers' numpy_to_pil does: round(x * 255).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs::diffusion {

// rgb: [height, width, 3] in [0, 1] -> uint8 (values outside are clamped).
std::vector<uint8_t> to_rgb8(const std::vector<float>& rgb);

// Writes via a temporary file renamed into place.
Status write_png(const std::string& path, int64_t width, int64_t height,
                 const std::vector<uint8_t>& rgb8);

// The same PNG as write_png, in memory (the server's responses: no file per request).
Result<std::string> encode_png(int64_t width, int64_t height, const std::vector<uint8_t>& rgb8);

// Reads an 8-bit RGB or RGBA PNG (alpha dropped; grey, palette and 16-bit converted).
Status read_png(const std::string& path, int64_t* width, int64_t* height,
                std::vector<uint8_t>* rgb8);

}  // namespace qs::diffusion
