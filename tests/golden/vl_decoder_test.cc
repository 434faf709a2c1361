// golden: the decoder of a random tiny Qwen2.5-VL against transformers
// (tests/golden/fixtures/vl, scripts/golden/gen_vl_fixtures.py): the 3-D M-RoPE positions of
// prompts with no, one and two images equal get_rope_index's; with the vision tower's output
// (from the fixture) scattered into the image placeholders, the logits of every prompt
// position and a greedy continuation over the KV cache (decode positions shifted by the
// prompt's rope delta) equal transformers' within the text families' tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/reference_tensors.h"
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "models/model.h"
#include "models/mrope.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vl";

class VlDecoder : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = models::Model::load((kDir / "qwen2_5_vl").string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }
  std::vector<float> f32(const std::string& n) { return ref_.f32(n); }
  std::vector<int32_t> i32(const std::string& n) { return ref_.i32(n); }
  std::vector<models::VisionGrid> grids(const std::string& c) {
    std::vector<models::VisionGrid> g;
    const int n = c == "text" ? 0 : c == "image" ? 1 : 2;
    for (int i = 0; i < n; ++i) {
      const std::vector<int32_t> thw = i32("image" + std::to_string(i) + "_grid_thw");
      g.push_back({thw[0], thw[1], thw[2]});
    }
    return g;
  }

  testing::ReferenceTensors ref_{kDir / "reference.safetensors"};
  std::unique_ptr<models::Model> model_;
  ThreadPool pool_{2};
};

TEST_F(VlDecoder, ConfigIsReadFromTextConfig) {
  const models::ModelConfig& c = model_->config();
  EXPECT_EQ(c.family, models::Family::kQwen2_5_VL);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(c.image_token_id, 290);
  EXPECT_EQ(c.vision_merge_size, 2);
}

TEST_F(VlDecoder, PositionsAreTransformersRopeIndex) {
  for (const std::string c : {"text", "image", "two_images"}) {
    const std::vector<int32_t> ids = i32(c + "_ids");
    auto p = models::mrope_positions(ids, model_->config(), grids(c), {});
    ASSERT_TRUE(p.ok()) << c << ": " << p.status().to_string();
    EXPECT_EQ(p->positions, i32(c + "_positions")) << c;
    EXPECT_EQ(p->delta, i32(c + "_rope_delta")[0]) << c;
  }
  // The placeholders and the grids must agree.
  const std::vector<int32_t> ids = i32("image_ids");
  EXPECT_FALSE(models::mrope_positions(ids, model_->config(), {}, {}).ok());
  EXPECT_FALSE(models::mrope_positions(ids, model_->config(), grids("two_images"), {}).ok());
  std::vector<models::VisionGrid> wrong = grids("image");
  wrong[0].w = 8;
  EXPECT_FALSE(models::mrope_positions(ids, model_->config(), wrong, {}).ok());
}

TEST_F(VlDecoder, PromptLogitsAndGreedyStepsMatchTransformers) {
  const models::ModelConfig& c = model_->config();
  for (const std::string name : {"text", "image", "two_images"}) {
    const std::vector<int32_t> ids = i32(name + "_ids");
    const int64_t n = static_cast<int64_t>(ids.size()), steps = 6;
    auto pos = models::mrope_positions(ids, c, grids(name), {});
    ASSERT_TRUE(pos.ok());
    engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim, (n + steps + 15) / 16, 16});
    ASSERT_TRUE(cache.reserve(0, n + steps).ok());
    models::ForwardBatch batch;
    batch.token_ids = ids;
    batch.seqs = {{0, n, 0, cache.block_table(0)}};
    batch.all_logits = true;
    batch.mrope_positions = pos->positions;
    std::vector<float> embeds;
    if (name != "text") {
      embeds = f32(name + "_image_embeds");
      int64_t used = 0;
      for (int64_t t = 0; t < n;) {  // each run of placeholders takes the next embeddings
        if (ids[t] != c.image_token_id) {
          ++t;
          continue;
        }
        int64_t end = t;
        while (end < n && ids[end] == c.image_token_id) ++end;
        batch.embeddings.push_back({t, end - t, embeds.data() + used * c.hidden_size});
        used += end - t;
        t = end;
      }
      ASSERT_EQ(used * c.hidden_size, static_cast<int64_t>(embeds.size()));
    }
    std::vector<float> logits;
    ASSERT_TRUE(model_->forward(batch, cache.layers(), pool_, &logits).ok());
    const std::vector<float> want = f32(name + "_logits");
    ASSERT_EQ(logits.size(), want.size());
    EXPECT_EQ(testing::count_off(logits.data(), want.data(), want.size()), 0) << name;

    const std::vector<int32_t> greedy = i32(name + "_greedy");
    const std::vector<float> greedy_logits = f32(name + "_greedy_logits");
    std::vector<float> row(logits.end() - c.vocab_size, logits.end());
    for (int64_t s = 0; s < steps; ++s) {
      const int32_t next =
          static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      EXPECT_EQ(next, greedy[s]) << name << " step " << s;
      EXPECT_EQ(
          testing::count_off(row.data(), greedy_logits.data() + s * c.vocab_size, c.vocab_size), 0)
          << name << " step " << s;
      models::ForwardBatch step;
      step.token_ids = {greedy[s]};
      step.seqs = {{0, 1, n + s, cache.block_table(0)}};
      const int32_t p = static_cast<int32_t>(n + s + pos->delta);
      step.mrope_positions = {p, p, p};
      ASSERT_TRUE(model_->forward(step, cache.layers(), pool_, &row).ok());
    }
  }
}

}  // namespace
}  // namespace qs
