// golden: the decoder of a random tiny Qwen2.5-VL against transformers
// (tests/golden/fixtures/vl, scripts/golden/gen_vl_fixtures.py): the 3-D M-RoPE positions of
// prompts with no, one and two images, a video, and an image and a video equal
// get_rope_index's (a video's temporal patches tokens_per_second x seconds apart, the text after
// it resuming at its start + max(h, w) / merge); with the towers' output (from the fixture)
// scattered into the placeholders, the logits of every prompt position and a greedy
// continuation over the KV cache (decode positions shifted by the prompt's rope delta) equal
// transformers' within the text families' tolerance. Items that do not fit are refused.
#include <gtest/gtest.h>

#include <algorithm>
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
  testing::ReferenceTensors video_{kDir / "video_reference.safetensors"};
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

// Scatters `rows` (in order) over the placeholders `id` of `ids`, one span per run.
void scatter(const std::vector<int32_t>& ids, int32_t id, const std::vector<float>& rows,
             int64_t hidden, models::ForwardBatch* batch) {
  const int64_t n = static_cast<int64_t>(ids.size());
  int64_t used = 0;
  for (int64_t t = 0; t < n;) {
    if (ids[t] != id) {
      ++t;
      continue;
    }
    int64_t end = t;
    while (end < n && ids[end] == id) ++end;
    batch->embeddings.push_back({t, end - t, rows.data() + used * hidden});
    used += end - t;
    t = end;
  }
  ASSERT_EQ(used * hidden, static_cast<int64_t>(rows.size()));
}

// The prompt `name` of `ref` through the decoder at `positions`, its placeholders filled from
// <name>_image_embeds / <name>_video_embeds: every prompt position's logits, then six greedy
// steps over the cache at the cache length + the delta.
void expect_transformers_logits(const models::Model& model, const testing::ReferenceTensors& ref,
                                const std::string& name, const models::MropePositions& pos,
                                ThreadPool& pool) {
  const models::ModelConfig& c = model.config();
  const std::vector<int32_t> ids = ref.i32(name + "_ids");
  const int64_t n = static_cast<int64_t>(ids.size()), steps = 6;
  engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim, (n + steps + 15) / 16, 16});
  ASSERT_TRUE(cache.reserve(0, n + steps).ok());
  models::ForwardBatch batch;
  batch.token_ids = ids;
  batch.seqs = {{0, n, 0, cache.block_table(0)}};
  batch.all_logits = true;
  batch.mrope_positions = pos.positions;
  std::vector<float> images, videos;
  if (ref.has(name + "_image_embeds")) {
    images = ref.f32(name + "_image_embeds");
    scatter(ids, c.image_token_id, images, c.hidden_size, &batch);
  }
  if (ref.has(name + "_video_embeds")) {
    videos = ref.f32(name + "_video_embeds");
    scatter(ids, c.video_token_id, videos, c.hidden_size, &batch);
  }
  std::vector<float> logits;
  ASSERT_TRUE(model.forward(batch, cache.layers(), pool, &logits).ok());
  const std::vector<float> want = ref.f32(name + "_logits");
  ASSERT_EQ(logits.size(), want.size());
  EXPECT_EQ(testing::count_off(logits.data(), want.data(), want.size()), 0) << name;

  const std::vector<int32_t> greedy = ref.i32(name + "_greedy");
  const std::vector<float> greedy_logits = ref.f32(name + "_greedy_logits");
  std::vector<float> row(logits.end() - c.vocab_size, logits.end());
  for (int64_t s = 0; s < steps; ++s) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    EXPECT_EQ(next, greedy[s]) << name << " step " << s;
    EXPECT_EQ(testing::count_off(row.data(), greedy_logits.data() + s * c.vocab_size, c.vocab_size),
              0)
        << name << " step " << s;
    models::ForwardBatch step;
    step.token_ids = {greedy[s]};
    step.seqs = {{0, 1, n + s, cache.block_table(0)}};
    const int32_t p = static_cast<int32_t>(n + s + pos.delta);
    step.mrope_positions = {p, p, p};
    ASSERT_TRUE(model.forward(step, cache.layers(), pool, &row).ok());
  }
}

TEST_F(VlDecoder, PromptLogitsAndGreedyStepsMatchTransformers) {
  for (const std::string name : {"text", "image", "two_images"}) {
    auto pos = models::mrope_positions(i32(name + "_ids"), model_->config(), grids(name), {});
    ASSERT_TRUE(pos.ok());
    expect_transformers_logits(*model_, ref_, name, *pos, pool_);
  }
}

// The video prompts' items: each run of placeholders, the video at the case's seconds per
// temporal patch.
std::vector<models::MropeItem> video_items(const testing::ReferenceTensors& ref,
                                           const testing::ReferenceTensors& video,
                                           const std::string& name) {
  const std::vector<int32_t> ids = video.i32(name + "_ids");
  std::vector<models::MropeItem> items;
  for (size_t t = 0; t < ids.size(); ++t) {
    if ((ids[t] != 290 && ids[t] != 291) || (t > 0 && ids[t - 1] == ids[t])) continue;
    models::MropeItem it;
    it.offset = static_cast<int64_t>(t);
    const bool is_video = ids[t] == 291;
    it.kind = is_video ? models::MropeItem::Kind::kVideo : models::MropeItem::Kind::kImage;
    const std::vector<int32_t> g =
        is_video ? video.i32("video0_grid_thw") : ref.i32("image0_grid_thw");
    it.grid = {g[0], g[1], g[2]};
    if (is_video) it.grid.seconds_per_t = video.f32(name + "_second_per_grid")[0];
    items.push_back(it);
  }
  return items;
}

TEST_F(VlDecoder, VideoPositionsAreTransformersRopeIndex) {
  for (const std::string c : {"video", "image_video"}) {
    const std::vector<int32_t> ids = video_.i32(c + "_ids");
    const std::vector<models::MropeItem> items = video_items(ref_, video_, c);
    ASSERT_EQ(items.size(), c == "video" ? 1u : 2u);
    auto p = models::mrope_positions(ids, model_->config(), items);
    ASSERT_TRUE(p.ok()) << c << ": " << p.status().to_string();
    EXPECT_EQ(p->positions, video_.i32(c + "_positions")) << c;
    EXPECT_EQ(p->delta, video_.i32(c + "_rope_delta")[0]) << c;
    // The same from the runs alone.
    std::vector<models::VisionGrid> images, videos;
    for (const models::MropeItem& it : items) {
      (it.kind == models::MropeItem::Kind::kVideo ? videos : images).push_back(it.grid);
    }
    auto runs = models::mrope_positions(ids, model_->config(), images, videos);
    ASSERT_TRUE(runs.ok()) << runs.status().to_string();
    EXPECT_EQ(runs->positions, p->positions);
  }
  // The text after a video of 3 temporal patches 2 ticks apart (0.5 s at 4 a second) resumes
  // at its start + max(4, 2) / 2 = 6, inside the video's span (temporal 4, 6, 8).
  const std::vector<int32_t> pos = video_.i32("video_positions");
  EXPECT_EQ(pos[8], 8);   // the third frame's temporal position
  EXPECT_EQ(pos[10], 6);  // <|vision_end|> after it
}

TEST_F(VlDecoder, VideoPromptLogitsAndGreedyStepsMatchTransformers) {
  for (const std::string name : {"video", "image_video"}) {
    auto pos = models::mrope_positions(video_.i32(name + "_ids"), model_->config(),
                                       video_items(ref_, video_, name));
    ASSERT_TRUE(pos.ok()) << pos.status().to_string();
    expect_transformers_logits(*model_, video_, name, *pos, pool_);
  }
}

TEST_F(VlDecoder, ItemsThatDoNotFitTheirPlaceholdersAreRefused) {
  const models::ModelConfig& c = model_->config();
  const std::vector<int32_t> ids = video_.i32("image_video_ids");
  const std::vector<models::MropeItem> good = video_items(ref_, video_, "image_video");
  ASSERT_TRUE(models::mrope_positions(ids, c, good).ok());
  auto refused = [&](std::vector<models::MropeItem> items, const std::string& why) {
    auto p = models::mrope_positions(ids, c, items);
    ASSERT_FALSE(p.ok()) << why;
    EXPECT_FALSE(p.status().message().empty()) << why;
  };
  auto items = good;
  items[1].grid.t = 2;  // 4 tokens over a run of 6
  refused(items, "a shorter video");
  items = good;
  items[1].grid.t = 4;  // past the run and into the text
  refused(items, "a longer video");
  items = good;
  items[1].grid.seconds_per_t = -1;
  refused(items, "negative seconds");
  items = good;
  items[1].grid.h = 3;  // not a multiple of the merge size
  refused(items, "an odd grid");
  items = good;
  items[1].grid.h = int64_t{1} << 40;  // the token count would overflow
  refused(items, "a huge grid");
  items = good;
  std::swap(items[0], items[1]);
  refused(items, "items out of order");
  items = good;
  items.pop_back();
  refused(items, "a run of placeholders outside every item");
  items = good;
  items[1].kind = models::MropeItem::Kind::kAudio;
  items[1].audio_tokens = 6;
  refused(items, "audio on Qwen2.5-VL");
  items = good;
  items[1].audio_tokens = 2;  // a sound track: Qwen2.5-VL has no TMRoPE
  refused(items, "a video with its sound on Qwen2.5-VL");
  EXPECT_FALSE(models::audio_in_video_chunks(c, good[1].grid, 10).ok());
}

}  // namespace
}  // namespace qs
