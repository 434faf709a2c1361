// diffusion: the same-seed comparison of two pipelines' outputs (vLLM-Omni's
// compare_diffusion_trajectory_similarity tool, plus SSIM): per image pair PSNR, SSIM and the
// largest pixel error on 8-bit RGB, and the cosine similarity of the final latents.
#pragma once

#include <cstdint>
#include <vector>

namespace qs::diffusion {

struct ImageComparison {
  double psnr_db = 0;     // 10 log10(255^2 / MSE); +inf when the images are identical
  double ssim = 0;        // mean SSIM over channels and windows
  int max_abs_error = 0;  // 0..255
  double mean_abs_error = 0;
};

// a, b: [h, w, 3] uint8. SSIM as Wang et al. 2004: 11x11 Gaussian window (sigma 1.5),
// K1 = 0.01, K2 = 0.03, L = 255, per channel over the windows that fit inside the image
// (no padding), averaged; images smaller than 11 px on a side use a window of their size.
ImageComparison compare_images(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                               int64_t width, int64_t height);

// a . b / (|a| |b|); 1 for two zero vectors.
double cosine_similarity(const std::vector<float>& a, const std::vector<float>& b);

// Rows of [reference | candidate] pairs, with a 4 px white gutter: [rows * h + gutters,
// 2 w + gutter, 3].
std::vector<uint8_t> side_by_side_grid(const std::vector<std::vector<uint8_t>>& reference,
                                       const std::vector<std::vector<uint8_t>>& candidate,
                                       int64_t width, int64_t height, int64_t* grid_width,
                                       int64_t* grid_height);

}  // namespace qs::diffusion
