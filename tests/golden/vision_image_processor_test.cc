// golden: image input against Pillow 13 and transformers 5.23's Qwen2VLImageProcessor (the
// PIL backend), on the fixtures of scripts/golden/gen_vision_fixtures.py
// (tests/golden/fixtures/vision/README.md): every image decodes to Pillow's RGB (exactly, JPEG
// included), Pillow's BICUBIC resize is reproduced to the byte, and pixel_values match within
// 1e-6 with equal grids.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../common/golden_fixtures.h"
#include "core/json.h"
#include "vision/image_file.h"
#include "vision/pil_resize.h"
#include "vision/qwen2_vl_image_processor.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kVisionFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vision";

const json& reference() {
  static const json ref = [] {
    auto r = read_json((kVisionFixtures / "reference.json").string());
    QS_CHECK_MSG(r.ok(), r.status().to_string().c_str());
    return *r;
  }();
  return ref;
}

vision::RgbImage read_image(const std::string& file, const vision::ImageReadOptions& options = {}) {
  auto image = vision::read_image_file((kVisionFixtures / file).string(), options);
  QS_CHECK_MSG(image.ok(), image.status().to_string().c_str());
  return std::move(image).value();
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

int max_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i])));
  }
  return worst;
}

// The references are stored as 8-bit RGB PNGs; that decoding is first checked against raw bytes.
TEST(VisionGolden, PngReferencesDecodeToTheirRawBytes) {
  int checked = 0;
  for (const auto& [name, entry] : reference()["images"].items()) {
    if (!entry.contains("decoded_raw")) continue;
    const std::string raw = file_bytes(kVisionFixtures / entry["decoded_raw"].get<std::string>());
    const std::vector<uint8_t> expected(raw.begin(), raw.end());
    EXPECT_EQ(read_image(name).pixels, expected) << name;
    EXPECT_EQ(read_image(entry["decoded"].get<std::string>()).pixels, expected) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// Every image, every format: our RGB against Pillow's (exif_transpose, then transformers'
// convert_to_rgb over white; and convert("RGB"), alpha dropped, where that differs).
TEST(VisionGolden, DecodedPixelsArePillows) {
  for (const auto& [name, entry] : reference()["images"].items()) {
    const vision::RgbImage ours = read_image(name);
    EXPECT_EQ(ours.width, entry["width"].get<int64_t>()) << name;
    EXPECT_EQ(ours.height, entry["height"].get<int64_t>()) << name;
    const vision::RgbImage pil = read_image(entry["decoded"].get<std::string>());
    ASSERT_EQ(ours.pixels.size(), pil.pixels.size()) << name;
    // libjpeg-turbo 2.1.5 (Debian) against the 3.x inside Pillow's wheel: the same integer
    // IDCT and upsampling, so JPEG is held to 0 like the lossless formats.
    EXPECT_EQ(max_abs_diff(ours.pixels, pil.pixels), 0) << name;
    if (entry.contains("decoded_drop")) {
      const vision::RgbImage dropped = read_image(name, {.alpha = vision::AlphaMode::kDrop});
      EXPECT_EQ(dropped.pixels, read_image(entry["decoded_drop"].get<std::string>()).pixels)
          << name;
    }
  }
}

TEST(VisionGolden, ExifOrientationAsPillowsExifTranspose) {
  for (int k = 2; k <= 8; ++k) {
    const std::string name = "orient" + std::to_string(k) + "_5x3.png";
    const vision::RgbImage upright = read_image(name);
    EXPECT_EQ(upright.exif_orientation, k);
    EXPECT_EQ(upright.width, k >= 5 ? 3 : 5) << name;
    const vision::RgbImage as_stored = read_image(name, {.apply_exif_orientation = false});
    EXPECT_EQ(as_stored.width, 5) << name;
  }
  EXPECT_EQ(read_image("orient6_40x24.jpg").exif_orientation, 6);   // JPEG APP1
  EXPECT_EQ(read_image("orient8_20x12.webp").exif_orientation, 8);  // WebP EXIF chunk
}

// Pillow's BICUBIC on PIL's own decoded RGB, to the size smart_resize gives: the same bytes.
TEST(VisionGolden, BicubicResizeIsPillowsToTheByte) {
  for (const auto& [c, entry] : reference()["cases"].items()) {
    const auto& image_entry = reference()["images"][entry["image"].get<std::string>()];
    const vision::RgbImage pil = read_image(image_entry["decoded"].get<std::string>());
    const int64_t h = entry["resized_height"].get<int64_t>();
    const int64_t w = entry["resized_width"].get<int64_t>();
    const std::vector<uint8_t> ours =
        vision::pil_resize_bicubic(pil.pixels, pil.width, pil.height, 3, w, h);
    const vision::RgbImage expected = read_image(entry["resized"].get<std::string>());
    ASSERT_EQ(expected.width, w) << c;
    EXPECT_EQ(max_abs_diff(ours, expected.pixels), 0) << c;
    EXPECT_EQ(ours, expected.pixels) << c;
  }
}

// The whole processor from the image file and the checkpoint's preprocessor_config.json.
TEST(VisionGolden, PixelValuesAndGridsAreTheProcessors) {
  for (const auto& [c, entry] : reference()["cases"].items()) {
    auto config = vision::load_qwen2_vl_image_config(
        (kVisionFixtures / entry["config"].get<std::string>()).string());
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    const vision::RgbImage image = read_image(entry["image"].get<std::string>());
    auto patches = vision::qwen2_vl_preprocess(image, *config);
    ASSERT_TRUE(patches.ok()) << c << ": " << patches.status().to_string();
    const auto& grid = entry["image_grid_thw"];
    EXPECT_EQ(patches->grid_thw[0], grid[0].get<int64_t>()) << c;
    EXPECT_EQ(patches->grid_thw[1], grid[1].get<int64_t>()) << c;
    EXPECT_EQ(patches->grid_thw[2], grid[2].get<int64_t>()) << c;
    EXPECT_EQ(patches->resized.height, entry["resized_height"].get<int64_t>()) << c;
    EXPECT_EQ(patches->resized.width, entry["resized_width"].get<int64_t>()) << c;
    ASSERT_EQ(patches->n_patches, entry["shape"][0].get<int64_t>()) << c;
    ASSERT_EQ(patches->patch_dim, entry["shape"][1].get<int64_t>()) << c;
    EXPECT_EQ(patches->n_tokens, patches->n_patches / 4) << c;

    const auto& rows = entry["rows"];
    const int64_t dim = patches->patch_dim;
    const std::vector<float> ref =
        testing::read_floats(kVisionFixtures / entry["pixel_values"].get<std::string>(), 0,
                             static_cast<int64_t>(rows.size()) * dim);
    double err = 0.0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* ours = patches->pixel_values.data() + rows[r].get<int64_t>() * dim;
      for (int64_t i = 0; i < dim; ++i) {
        err = std::max(err, static_cast<double>(std::fabs(ours[i] - ref[r * dim + i])));
      }
    }
    EXPECT_LE(err, 1e-6) << c;
    double sum = 0.0, abs_sum = 0.0;
    for (float v : patches->pixel_values) {
      sum += v;
      abs_sum += std::fabs(v);
    }
    const double n = static_cast<double>(patches->pixel_values.size());
    EXPECT_NEAR(sum, entry["sum"].get<double>(), 1e-6 * n) << c;
    EXPECT_NEAR(abs_sum, entry["abs_sum"].get<double>(), 1e-6 * n) << c;
    std::printf("%-18s grid (1, %lld, %lld)  pixel_values max |error| %.3g over %zu rows\n",
                c.c_str(), static_cast<long long>(patches->grid_thw[1]),
                static_cast<long long>(patches->grid_thw[2]), err, rows.size());
  }
}

}  // namespace
}  // namespace qs
