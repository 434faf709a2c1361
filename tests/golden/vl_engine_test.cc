// golden: images and videos through the engine on the random tiny Qwen2.5-VL of
// tests/golden/fixtures/vl: requests carrying their images and videos (pixel values, grid,
// seconds per temporal patch, hash) next to text-only ones in the same batches give
// transformers' greedy tokens (the tower runs once per request, its output fills the
// placeholders of each prefill chunk, the M-RoPE positions and the decode delta are the
// request's); the prefix cache shares blocks over an image only with a request whose image has
// the same hash; requests whose items do not fit their placeholders are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../common/engine_runner.h"
#include "../common/reference_tensors.h"
#include "models/model.h"
#include "vision/qwen2_5_vl_vision.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vl";

class VlEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = models::Model::load((kDir / "qwen2_5_vl").string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto t = vision::Qwen25VisionTower::load((kDir / "qwen2_5_vl").string());
    ASSERT_TRUE(t.ok());
    tower_ = std::make_unique<vision::Qwen25VisionTower>(std::move(*t));
  }
  std::vector<int32_t> i32(const std::string& n) { return ref_.i32(n); }
  models::MultimodalItem image(int i, int64_t offset, uint64_t hash) {
    models::MultimodalItem it;
    const std::vector<int32_t> g = i32("image" + std::to_string(i) + "_grid_thw");
    it.grid = {g[0], g[1], g[2]};
    it.offset = offset;
    it.pixels = std::make_shared<const std::vector<float>>(
        ref_.at("image" + std::to_string(i) + "_pixel_values").to_f32());
    it.hash = hash;
    return it;
  }
  // The case's prompt with its images at their placeholder runs.
  engine::EngineRequest request(const std::string& id, const std::string& c, uint64_t hash = 1) {
    engine::EngineRequest r = testing::greedy_request(id, i32(c + "_ids"), 6);
    r.params.ignore_eos = true;
    int img = 0;
    for (size_t t = 0; t < r.prompt_ids.size(); ++t) {
      if (r.prompt_ids[t] == 290 && (t == 0 || r.prompt_ids[t - 1] != 290)) {
        r.mm_items.push_back(image(img, static_cast<int64_t>(t), hash + img));
        ++img;
      }
    }
    return r;
  }
  // A video prompt of video_reference.safetensors with its items (image 0, video 0).
  engine::EngineRequest video_request(const std::string& id, const std::string& c,
                                      uint64_t hash = 1) {
    engine::EngineRequest r = testing::greedy_request(id, video_.i32(c + "_ids"), 6);
    r.params.ignore_eos = true;
    for (size_t t = 0; t < r.prompt_ids.size(); ++t) {
      const int32_t id_t = r.prompt_ids[t];
      if ((id_t != 290 && id_t != 291) || r.prompt_ids[t - 1] == id_t) continue;
      if (id_t == 290) {
        r.mm_items.push_back(image(0, static_cast<int64_t>(t), hash));
        continue;
      }
      models::MultimodalItem it;
      it.video = true;
      const std::vector<int32_t> g = video_.i32("video0_grid_thw");
      it.grid = {g[0], g[1], g[2], video_.f32(c + "_second_per_grid")[0]};
      it.offset = static_cast<int64_t>(t);
      it.pixels = std::make_shared<const std::vector<float>>(video_.f32("video0_pixel_values"));
      it.hash = hash + 1;
      r.mm_items.push_back(it);
    }
    return r;
  }
  std::unique_ptr<engine::Engine> make(int64_t block_size = 16, int64_t budget = 2048) {
    engine::EngineConfig cfg;
    cfg.vision = tower_.get();
    cfg.block_size = block_size;
    cfg.max_num_batched_tokens = budget;
    return testing::make_engine(*model_, nullptr, {}, pool_, 512, cfg);
  }

  testing::ReferenceTensors ref_{kDir / "reference.safetensors"};
  testing::ReferenceTensors video_{kDir / "video_reference.safetensors"};
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<vision::Qwen25VisionTower> tower_;
  ThreadPool pool_{2};
};

TEST_F(VlEngine, ImageAndTextRequestsTogetherGiveTransformersGreedyTokens) {
  // A budget of 8 tokens a step cuts the image prompts' placeholder runs across chunks.
  for (int64_t budget : {2048, 8}) {
    auto e = make(16, budget);
    ASSERT_TRUE(e->add_request(request("text", "text")).ok());
    ASSERT_TRUE(e->add_request(request("image", "image")).ok());
    ASSERT_TRUE(e->add_request(request("two", "two_images", 10)).ok());
    const auto done = testing::run_to_completion(*e);
    EXPECT_EQ(done.at("text").ids, i32("text_greedy")) << "budget " << budget;
    EXPECT_EQ(done.at("image").ids, i32("image_greedy")) << "budget " << budget;
    EXPECT_EQ(done.at("two").ids, i32("two_images_greedy")) << "budget " << budget;
  }
}

TEST_F(VlEngine, TowerEncodesAVideoAsTransformers) {
  const std::vector<int32_t> g = video_.i32("video0_grid_thw");
  const models::VisionGrid grid[] = {{g[0], g[1], g[2]}};
  std::vector<float> out;
  ASSERT_TRUE(tower_->encode(video_.f32("video0_pixel_values").data(), grid, &out, pool_).ok());
  const std::vector<float> want = video_.f32("video_video_embeds");
  ASSERT_EQ(out.size(), want.size());
  EXPECT_EQ(testing::count_off(out.data(), want.data(), want.size()), 0);
}

TEST_F(VlEngine, VideoRequestsGiveTransformersGreedyTokens) {
  // 5 tokens a step cut the video's run, and the image's, across chunks.
  for (int64_t budget : {2048, 5}) {
    auto e = make(16, budget);
    ASSERT_TRUE(e->add_request(video_request("video", "video")).ok());
    ASSERT_TRUE(e->add_request(video_request("both", "image_video", 20)).ok());
    ASSERT_TRUE(e->add_request(request("text", "text")).ok());
    const auto done = testing::run_to_completion(*e);
    EXPECT_EQ(done.at("video").ids, video_.i32("video_greedy")) << "budget " << budget;
    EXPECT_EQ(done.at("both").ids, video_.i32("image_video_greedy")) << "budget " << budget;
    EXPECT_EQ(done.at("text").ids, i32("text_greedy")) << "budget " << budget;
  }
}

TEST_F(VlEngine, VideosThatDoNotFitThePromptAreRefused) {
  auto e = make();
  engine::EngineRequest r = video_request("r", "video");
  ASSERT_EQ(r.mm_items.size(), 1u);
  r.mm_items[0].grid.t = 2;  // 4 tokens over a run of 6, and too few pixels
  EXPECT_FALSE(e->add_request(r).ok());
  r = video_request("r", "video");
  r.mm_items[0].grid.seconds_per_t = std::nan("");
  EXPECT_FALSE(e->add_request(r).ok());
  r = video_request("r", "video");
  r.mm_items[0].video = false;  // an image over video placeholders
  EXPECT_FALSE(e->add_request(r).ok());
  // A sound track on a model without an audio tower.
  r = video_request("r", "video");
  r.mm_items[0].frames = 4;
  r.mm_items[0].features = std::make_shared<const std::vector<float>>(128 * 4, 0.0f);
  EXPECT_FALSE(e->add_request(r).ok());
  EXPECT_TRUE(e->add_request(video_request("ok", "video")).ok());
}

TEST_F(VlEngine, PrefixCacheKeysIncludeTheImage) {
  auto e = make(/*block_size=*/4);
  ASSERT_TRUE(e->add_request(request("a", "two_images", 10)).ok());
  auto first = testing::run_to_completion(*e);
  // The same images: the prompt's full blocks are shared, the tokens are the same.
  ASSERT_TRUE(e->add_request(request("b", "two_images", 10)).ok());
  auto same = testing::run_to_completion(*e);
  EXPECT_EQ(same.at("b").num_cached_tokens, 24);  // 25 tokens: six full blocks of 4
  EXPECT_EQ(same.at("b").ids, first.at("a").ids);
  // Other hashes (other pictures, by their bytes): only the block before the first image.
  ASSERT_TRUE(e->add_request(request("c", "two_images", 99)).ok());
  auto other = testing::run_to_completion(*e);
  EXPECT_EQ(other.at("c").num_cached_tokens, 0);  // the image starts in block 0 (position 3)
}

TEST_F(VlEngine, ItemsThatDoNotFitThePromptAreRefused) {
  auto e = make();
  engine::EngineRequest r = request("r", "image");
  r.mm_items[0].offset += 1;  // off the placeholder run
  EXPECT_FALSE(e->add_request(r).ok());
  r = request("r", "image");
  r.mm_items.push_back(image(1, 20, 5));  // past the prompt
  EXPECT_FALSE(e->add_request(r).ok());
  r = request("r", "image");
  r.mm_items[0].pixels = std::make_shared<const std::vector<float>>(10, 0.0f);
  EXPECT_FALSE(e->add_request(r).ok());
  r = request("r", "image");
  r.mm_items[0].grid.w = 8;  // 8 tokens for a run of 6
  EXPECT_FALSE(e->add_request(r).ok());
  // An engine without a tower takes no images.
  auto plain = testing::make_engine(*model_, nullptr, {}, pool_, 512);
  EXPECT_FALSE(plain->add_request(request("r", "image")).ok());
  EXPECT_TRUE(plain->add_request(request("t", "text")).ok());
}

}  // namespace
}  // namespace qs
