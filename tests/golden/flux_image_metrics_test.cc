// golden: compare-images' metrics against reference implementations on diffusers' two tiny
// pipeline PNGs (dev vs true CFG): PSNR and max error as numpy computes them, SSIM as
// pytorch_msssim does (reference.json "compare_dev_cfg"); identical images and the cosine of
// latents at their limits.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "diffusion/image_metrics.h"
#include "diffusion/png_image.h"
#include "flux_reference.h"

namespace qs {
namespace {

TEST(FluxImageMetrics, MatchReferenceImplementations) {
  int64_t w = 0, h = 0;
  std::vector<uint8_t> dev, cfg;
  ASSERT_TRUE(
      diffusion::read_png((testing::kFluxFixtures / "dev.png").string(), &w, &h, &dev).ok());
  ASSERT_TRUE(
      diffusion::read_png((testing::kFluxFixtures / "cfg.png").string(), &w, &h, &cfg).ok());
  std::ifstream in(testing::kFluxFixtures / "reference.json");
  const auto want = nlohmann::json::parse(in)["compare_dev_cfg"];
  const auto got = diffusion::compare_images(dev, cfg, w, h);
  EXPECT_NEAR(got.psnr_db, want["psnr_db"].get<double>(), 1e-9);
  EXPECT_EQ(got.max_abs_error, want["max_abs_error"].get<int>());
  // pytorch_msssim filters in f32 (conv2d); we sum in f64.
  EXPECT_NEAR(got.ssim, want["ssim"].get<double>(), 1e-5);

  const auto same = diffusion::compare_images(dev, dev, w, h);
  EXPECT_TRUE(std::isinf(same.psnr_db));
  EXPECT_NEAR(same.ssim, 1.0, 1e-12);
  EXPECT_EQ(same.max_abs_error, 0);
  EXPECT_DOUBLE_EQ(diffusion::cosine_similarity({1, 2, 3}, {2, 4, 6}), 1.0);
  EXPECT_NEAR(diffusion::cosine_similarity({1, 0}, {0, 1}), 0.0, 1e-12);
}

TEST(FluxImageMetrics, GridPlacesPairsSideBySide) {
  const std::vector<uint8_t> a(2 * 2 * 3, 10), b(2 * 2 * 3, 20);
  int64_t gw = 0, gh = 0;
  auto grid = diffusion::side_by_side_grid({a, a}, {b, b}, 2, 2, &gw, &gh);
  EXPECT_EQ(gw, 8);                        // 2 + 4 gutter + 2
  EXPECT_EQ(gh, 8);                        // 2 + 4 + 2
  EXPECT_EQ(grid[0], 10);                  // row 0, left
  EXPECT_EQ(grid[(0 * gw + 6) * 3], 20);   // row 0, right
  EXPECT_EQ(grid[(3 * gw + 0) * 3], 255);  // gutter
  EXPECT_EQ(grid[(7 * gw + 7) * 3], 20);   // row 1, right
}

}  // namespace
}  // namespace qs
