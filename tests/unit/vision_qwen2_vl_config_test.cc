// unit: the Qwen2-VL image processor's settings and size rule: preprocessor_config.json read
// with errors naming the field, smart_resize's rounding (Python's, halves to even), its
// clamps to [min_pixels, max_pixels] and its aspect-ratio limit.
#include <string>

#include <gtest/gtest.h>

#include "vision/qwen2_vl_image_processor.h"

namespace qs {
namespace {

using nlohmann::json;
using vision::parse_qwen2_vl_image_config;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Qwen2VLImageConfig, FieldsAndTheirPrecedence) {
  auto c = parse_qwen2_vl_image_config(
      json::parse(R"({"size": {"shortest_edge": 100, "longest_edge": 5000}, "max_pixels": 9000.0,
                      "image_mean": 0.5, "image_std": [1, 2, 3], "do_normalize": false})"),
      "p.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->min_pixels, 100);
  EXPECT_EQ(c->max_pixels, 9000);  // max_pixels overrides size, as the processor's __init__
  EXPECT_EQ(c->image_mean[2], 0.5);
  EXPECT_EQ(c->image_std[2], 3.0);
  EXPECT_FALSE(c->do_normalize);
  auto defaults = parse_qwen2_vl_image_config(json::object(), "p.json");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->max_pixels, 28 * 28 * 1280);
  EXPECT_EQ(defaults->patch_size, 14);
}

TEST(Qwen2VLImageConfig, BadFieldsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"patch_size": 0})", "patch_size"},
      {R"({"patch_size": 14.5})", "patch_size"},
      {R"({"merge_size": "2"})", "merge_size"},
      {R"({"min_pixels": 5000, "max_pixels": 4000})", "min_pixels"},
      {R"({"max_pixels": 1e12})", "max_pixels"},
      {R"({"image_std": [1, 0, 1]})", "image_std"},
      {R"({"image_mean": [1, 2]})", "image_mean"},
      {R"({"rescale_factor": -1})", "rescale_factor"},
      {R"({"do_resize": 1})", "do_resize"},
      {R"({"resample": 2})", "resample"},
      {R"({"size": 5})", "size"},
      {R"([1, 2])", "JSON object"},
  };
  for (const auto& [text, field] : cases) {
    auto c = parse_qwen2_vl_image_config(json::parse(text), "p.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_TRUE(has(c.status().message(), field)) << c.status().message();
    EXPECT_TRUE(has(c.status().message(), "p.json")) << c.status().message();
  }
  EXPECT_FALSE(vision::load_qwen2_vl_image_config("/nonexistent").ok());
}

TEST(Qwen2VLSmartResize, MatchesTransformers) {
  // Values from transformers' smart_resize (factor 28, min 3136, max 12845056 unless given).
  const struct {
    int64_t h, w, min, max, out_h, out_w;
  } cases[] = {
      {200, 300, 3136, 12845056, 196, 308},
      {42, 70, 3136, 12845056, 56, 56},        // 1.5 and 2.5 round to even: 2 and 2
      {20, 20, 3136, 12845056, 56, 56},        // grown to the minimum
      {200, 300, 3136, 15680, 84, 140},        // shrunk to the maximum
      {1, 200, 3136, 12845056, 28, 812},       // the aspect limit itself, grown
      {5000, 4000, 3136, 1003520, 1120, 896},  // exactly max_pixels
  };
  for (const auto& c : cases) {
    auto r = vision::smart_resize(c.h, c.w, 28, c.min, c.max);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->height, c.out_h) << c.h << "x" << c.w;
    EXPECT_EQ(r->width, c.out_w) << c.h << "x" << c.w;
  }
  auto wide = vision::smart_resize(1, 201, 28, 3136, 12845056);
  ASSERT_FALSE(wide.ok());
  EXPECT_TRUE(has(wide.status().message(), "aspect ratio"));
}

}  // namespace
}  // namespace qs
