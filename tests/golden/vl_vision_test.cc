// golden: Qwen2.5-VL's vision tower against transformers on the random tiny checkpoint of
// tests/golden/fixtures/vl (scripts/golden/gen_vl_fixtures.py): given the fixture's pixel
// values and grids, the merged output for one image (4 x 6 patches: windows cut at the edge,
// block 1 full attention) and for two images of different sizes in one call equals
// Qwen2_5_VisionTransformerPretrainedModel's pooler_output within the text families'
// tolerance. Bad grids are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/reference_tensors.h"
#include "core/thread_pool.h"
#include "vision/qwen2_5_vl_vision.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vl";

class VlVision : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = vision::Qwen25VisionTower::load((kDir / "qwen2_5_vl").string());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tower_ = std::make_unique<vision::Qwen25VisionTower>(std::move(*t));
  }
  models::VisionGrid grid(int i) {
    const Tensor& t = ref_.at("image" + std::to_string(i) + "_grid_thw");
    return {t.ptr<int32_t>()[0], t.ptr<int32_t>()[1], t.ptr<int32_t>()[2]};
  }
  std::vector<float> pixels(std::initializer_list<int> images) {
    std::vector<float> all;
    for (int i : images) {
      const std::vector<float> p = ref_.at("image" + std::to_string(i) + "_pixel_values").to_f32();
      all.insert(all.end(), p.begin(), p.end());
    }
    return all;
  }

  testing::ReferenceTensors ref_{kDir / "reference.safetensors"};
  std::unique_ptr<vision::Qwen25VisionTower> tower_;
  ThreadPool pool_{2};
};

TEST_F(VlVision, OneImageMatchesTransformers) {
  std::vector<float> out;
  const models::VisionGrid g[] = {grid(0)};
  ASSERT_TRUE(tower_->forward(pixels({0}).data(), g, &out, pool_).ok());
  const std::vector<float> want = ref_.at("image_image_embeds").to_f32();
  ASSERT_EQ(out.size(), want.size());
  EXPECT_EQ(testing::count_off(out.data(), want.data(), want.size()), 0);
}

TEST_F(VlVision, TwoImagesOfDifferentSizesMatchTransformers) {
  std::vector<float> out;
  const models::VisionGrid g[] = {grid(0), grid(1)};
  ASSERT_TRUE(tower_->forward(pixels({0, 1}).data(), g, &out, pool_).ok());
  const std::vector<float> want = ref_.at("two_images_image_embeds").to_f32();
  ASSERT_EQ(out.size(), want.size());
  EXPECT_EQ(testing::count_off(out.data(), want.data(), want.size()), 0);
}

TEST_F(VlVision, RefusesGridsThatAreNotWholeMergedPatches) {
  std::vector<float> out;
  const std::vector<float> p = pixels({0});
  const models::VisionGrid odd[] = {{1, 3, 6}};
  EXPECT_FALSE(tower_->forward(p.data(), odd, &out, pool_).ok());
  EXPECT_FALSE(tower_->forward(p.data(), {}, &out, pool_).ok());
}

TEST(VlVisionLoad, AModelWithoutATowerSaysSo) {
  auto t = vision::Qwen25VisionTower::load(
      (fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/hf/qwen2_tied").string());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().to_string().find("no vision tower"), std::string::npos);
}

}  // namespace
}  // namespace qs
