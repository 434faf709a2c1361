// diffusion: image and latent comparison metrics (see image_metrics.h).
#include "diffusion/image_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qs::diffusion {

ImageComparison compare_images(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                               int64_t width, int64_t height) {
  ImageComparison r;
  double se = 0, ae = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int d = std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
    r.max_abs_error = std::max(r.max_abs_error, d);
    se += static_cast<double>(d) * d;
    ae += d;
  }
  const double n = static_cast<double>(a.size());
  r.mean_abs_error = ae / n;
  r.psnr_db = se == 0 ? std::numeric_limits<double>::infinity()
                      : 10.0 * std::log10(255.0 * 255.0 / (se / n));

  const int64_t win = std::min<int64_t>({11, width, height}), half = win / 2;
  std::vector<double> g(static_cast<size_t>(win));
  double gs = 0;
  for (int64_t i = 0; i < win; ++i) gs += g[i] = std::exp(-0.5 * std::pow((i - half) / 1.5, 2));
  for (double& v : g) v /= gs;
  const double c1 = std::pow(0.01 * 255, 2), c2 = std::pow(0.03 * 255, 2);
  double total = 0;
  int64_t count = 0;
  for (int64_t ch = 0; ch < 3; ++ch) {
    for (int64_t y = 0; y + win <= height; ++y) {
      for (int64_t x = 0; x + win <= width; ++x) {
        double mx = 0, my = 0, xx = 0, yy = 0, xy = 0;
        for (int64_t u = 0; u < win; ++u) {
          for (int64_t v = 0; v < win; ++v) {
            const double w = g[u] * g[v];
            const size_t i = static_cast<size_t>(((y + u) * width + x + v) * 3 + ch);
            const double p = a[i], q = b[i];
            mx += w * p, my += w * q, xx += w * p * p, yy += w * q * q, xy += w * p * q;
          }
        }
        const double vx = xx - mx * mx, vy = yy - my * my, cxy = xy - mx * my;
        total +=
            ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2));
        ++count;
      }
    }
  }
  r.ssim = count > 0 ? total / static_cast<double>(count) : 1.0;
  return r;
}

double cosine_similarity(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  if (aa == 0 && bb == 0) return 1.0;
  if (aa == 0 || bb == 0) return 0.0;
  return ab / std::sqrt(aa * bb);
}

std::vector<uint8_t> side_by_side_grid(const std::vector<std::vector<uint8_t>>& reference,
                                       const std::vector<std::vector<uint8_t>>& candidate,
                                       int64_t width, int64_t height, int64_t* grid_width,
                                       int64_t* grid_height) {
  constexpr int64_t kGutter = 4;
  const int64_t rows = static_cast<int64_t>(reference.size());
  *grid_width = 2 * width + kGutter;
  *grid_height = rows * height + (rows > 0 ? rows - 1 : 0) * kGutter;
  std::vector<uint8_t> grid(static_cast<size_t>(*grid_width * *grid_height * 3), 255);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t side = 0; side < 2; ++side) {
      const std::vector<uint8_t>& img = side == 0 ? reference[r] : candidate[r];
      for (int64_t y = 0; y < height; ++y) {
        std::copy(img.begin() + y * width * 3, img.begin() + (y + 1) * width * 3,
                  grid.begin() +
                      ((r * (height + kGutter) + y) * *grid_width + side * (width + kGutter)) * 3);
      }
    }
  }
  return grid;
}

}  // namespace qs::diffusion
