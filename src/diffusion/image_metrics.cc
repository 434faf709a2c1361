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
  r.mse = se / n;
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

VideoComparison compare_videos(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                               int64_t frames, int64_t width, int64_t height) {
  VideoComparison r;
  const size_t plane = static_cast<size_t>(width * height * 3);
  double mse = 0, psnr = 0, ssim = 0, mae = 0;
  r.psnr_db_min = r.ssim_min = std::numeric_limits<double>::infinity();
  for (int64_t f = 0; f < frames; ++f) {
    const auto first = static_cast<std::ptrdiff_t>(f * plane);
    const std::vector<uint8_t> fa(a.begin() + first, a.begin() + first + plane);
    const std::vector<uint8_t> fb(b.begin() + first, b.begin() + first + plane);
    const ImageComparison m = compare_images(fa, fb, width, height);
    mse += m.mse, psnr += m.psnr_db, ssim += m.ssim, mae += m.mean_abs_error;
    r.psnr_db_min = std::min(r.psnr_db_min, m.psnr_db);
    r.ssim_min = std::min(r.ssim_min, m.ssim);
    r.max_abs_error = std::max(r.max_abs_error, m.max_abs_error);
    r.frames.push_back(m);
  }
  const double n = static_cast<double>(std::max<int64_t>(frames, 1));
  mse /= n;
  r.psnr_db =
      mse == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(255.0 * 255.0 / mse);
  r.psnr_db_mean = psnr / n;
  r.ssim_mean = ssim / n;
  r.mean_abs_error = mae / n;
  return r;
}

std::vector<uint8_t> image_grid(const std::vector<const uint8_t*>& cells, int64_t columns,
                                int64_t width, int64_t height, int64_t* grid_width,
                                int64_t* grid_height) {
  constexpr int64_t kGutter = 4;
  const int64_t n = static_cast<int64_t>(cells.size());
  const int64_t rows = (n + columns - 1) / columns;
  *grid_width = columns * width + (columns - 1) * kGutter;
  *grid_height = rows * height + (rows > 0 ? rows - 1 : 0) * kGutter;
  std::vector<uint8_t> grid(static_cast<size_t>(*grid_width * *grid_height * 3), 255);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / columns, col = i % columns;
    for (int64_t y = 0; y < height; ++y) {
      std::copy(cells[static_cast<size_t>(i)] + y * width * 3,
                cells[static_cast<size_t>(i)] + (y + 1) * width * 3,
                grid.begin() +
                    ((r * (height + kGutter) + y) * *grid_width + col * (width + kGutter)) * 3);
    }
  }
  return grid;
}

std::vector<uint8_t> side_by_side_grid(const std::vector<std::vector<uint8_t>>& reference,
                                       const std::vector<std::vector<uint8_t>>& candidate,
                                       int64_t width, int64_t height, int64_t* grid_width,
                                       int64_t* grid_height) {
  std::vector<const uint8_t*> cells;
  for (size_t r = 0; r < reference.size(); ++r) {
    cells.push_back(reference[r].data());
    cells.push_back(candidate[r].data());
  }
  return image_grid(cells, 2, width, height, grid_width, grid_height);
}

std::vector<int64_t> evenly_spaced_frames(int64_t frames, int64_t count) {
  count = std::min(count, frames);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) {
    // Rounded to the nearest frame: 81 frames in 8 give 0, 11, 23, 34, 46, 57, 69, 80.
    out.push_back(count == 1 ? 0 : (2 * i * (frames - 1) + (count - 1)) / (2 * (count - 1)));
  }
  return out;
}

std::vector<uint8_t> video_strip(const std::vector<uint8_t>& reference,
                                 const std::vector<uint8_t>& candidate,
                                 const std::vector<int64_t>& indices, int64_t width, int64_t height,
                                 int64_t* strip_width, int64_t* strip_height) {
  const int64_t plane = width * height * 3;
  std::vector<const uint8_t*> cells;
  for (const std::vector<uint8_t>* video : {&reference, &candidate}) {
    for (int64_t f : indices) cells.push_back(video->data() + f * plane);
  }
  const int64_t columns = std::max<int64_t>(static_cast<int64_t>(indices.size()), 1);
  return image_grid(cells, columns, width, height, strip_width, strip_height);
}

}  // namespace qs::diffusion
