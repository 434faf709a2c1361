// diffusion: the same-seed comparison of two pipelines' outputs (vLLM-Omni's
// compare_diffusion_trajectory_similarity tool, plus SSIM): per image pair PSNR, SSIM and the
// largest pixel error on 8-bit RGB, per video the same for every frame and over the frames,
// and the cosine similarity of the final latents.
#pragma once

#include <cstdint>
#include <vector>

namespace qs::diffusion {

struct ImageComparison {
  double psnr_db = 0;     // 10 log10(255^2 / MSE); +inf when the images are identical
  double mse = 0;         // mean squared error of the 0..255 values
  double ssim = 0;        // mean SSIM over channels and windows
  int max_abs_error = 0;  // 0..255
  double mean_abs_error = 0;
};

// a, b: [h, w, 3] uint8. SSIM as Wang et al. 2004: 11x11 Gaussian window (sigma 1.5),
// K1 = 0.01, K2 = 0.03, L = 255, per channel over the windows that fit inside the image
// (no padding), averaged; images smaller than 11 px on a side use a window of their size.
ImageComparison compare_images(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                               int64_t width, int64_t height);

// Two videos [frames, h, w, 3] uint8 frame by frame. The over-frame figures follow the
// per-frame ones: a mean or minimum PSNR that takes in an identical frame is +inf.
struct VideoComparison {
  std::vector<ImageComparison> frames;
  double psnr_db = 0;  // of the whole video (the MSE of every value, vLLM-Omni's all-frames PSNR)
  double psnr_db_mean = 0, psnr_db_min = 0;
  double ssim_mean = 0, ssim_min = 0;
  int max_abs_error = 0;
  double mean_abs_error = 0;
};
VideoComparison compare_videos(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                               int64_t frames, int64_t width, int64_t height);

// a . b / (|a| |b|); 1 for two zero vectors.
double cosine_similarity(const std::vector<float>& a, const std::vector<float>& b);

// Images [h, w, 3] laid out row by row, `columns` to a row, with 4 px white gutters between
// them (and white where the last row is short): [rows h + gutters, columns w + gutters, 3].
std::vector<uint8_t> image_grid(const std::vector<const uint8_t*>& cells, int64_t columns,
                                int64_t width, int64_t height, int64_t* grid_width,
                                int64_t* grid_height);

// Rows of [reference | candidate] pairs, with a 4 px white gutter: [rows * h + gutters,
// 2 w + gutter, 3].
std::vector<uint8_t> side_by_side_grid(const std::vector<std::vector<uint8_t>>& reference,
                                       const std::vector<std::vector<uint8_t>>& candidate,
                                       int64_t width, int64_t height, int64_t* grid_width,
                                       int64_t* grid_height);

// `count` frame indices spread evenly over [0, frames), first and last included (all of them
// when count >= frames).
std::vector<int64_t> evenly_spaced_frames(int64_t frames, int64_t count);

// Two videos [frames, h, w, 3] as a strip: the reference's frames `indices` on the top row, the
// candidate's below (image_grid's layout).
std::vector<uint8_t> video_strip(const std::vector<uint8_t>& reference,
                                 const std::vector<uint8_t>& candidate,
                                 const std::vector<int64_t>& indices, int64_t width, int64_t height,
                                 int64_t* strip_width, int64_t* strip_height);

}  // namespace qs::diffusion
