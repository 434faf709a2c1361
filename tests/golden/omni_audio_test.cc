// golden: Qwen2.5-Omni's thinker hearing, against transformers on a random tiny thinker
// (tests/golden/fixtures/omni, scripts/golden/gen_omni_fixtures.py): the audio tower's output
// for clips of 3.1 and 2.3 chunks (attention inside each chunk, the pooled pairs), the 3-D
// positions of a prompt with two clips (audio counts like text), and through the engine, the
// greedy tokens of that prompt with both clips as items. Bad clips are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../common/engine_runner.h"
#include "../common/reference_tensors.h"
#include "audio/qwen2_5_omni_audio.h"
#include "models/model.h"
#include "models/mrope.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/omni";
const std::string kModel = (kDir / "qwen2_5_omni_thinker").string();

class OmniAudio : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = audio::Qwen25OmniAudioTower::load(kModel);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tower_ = std::make_unique<audio::Qwen25OmniAudioTower>(std::move(*t));
  }
  std::vector<int32_t> i32(const std::string& n) { return ref_.i32(n); }
  models::MultimodalItem clip(int i, int64_t offset) {
    const Tensor& f = ref_.at("clip" + std::to_string(i) + "_features");
    models::MultimodalItem it;
    it.audio = true;
    it.offset = offset;
    it.frames = f.dim(1);
    it.features = std::make_shared<const std::vector<float>>(f.to_f32());
    it.hash = 100 + i;
    return it;
  }

  testing::ReferenceTensors ref_{kDir / "reference.safetensors"};
  std::unique_ptr<audio::Qwen25OmniAudioTower> tower_;
  ThreadPool pool_{2};
};

TEST_F(OmniAudio, TowerMatchesTransformers) {
  for (int i : {0, 1}) {
    const Tensor& f = ref_.at("clip" + std::to_string(i) + "_features");
    std::vector<float> out;
    ASSERT_TRUE(tower_->encode(f.to_f32().data(), f.dim(1), &out, pool_).ok());
    const std::vector<float> want = ref_.at("clip" + std::to_string(i) + "_embeds").to_f32();
    ASSERT_EQ(out.size(), want.size()) << i;
    EXPECT_EQ(testing::count_off(out.data(), want.data(), want.size()), 0) << i;
    EXPECT_EQ(tower_->tokens(f.dim(1)), static_cast<int64_t>(want.size()) / 64);
  }
  std::vector<float> out;
  EXPECT_FALSE(tower_->encode(std::vector<float>(256).data(), 2, &out, pool_).ok());
}

TEST_F(OmniAudio, PromptWithTwoClipsThroughTheEngine) {
  auto m = models::Model::load(kModel);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const models::ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.family, models::Family::kQwen2_5_OmniThinker);
  EXPECT_EQ(c.audio_token_id, 292);
  const std::vector<int32_t> ids = i32("audio_ids");
  auto pos = models::mrope_positions(ids, c, {}, {});
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(pos->positions, i32("audio_positions"));
  EXPECT_EQ(pos->delta, i32("audio_rope_delta")[0]);

  engine::EngineConfig cfg;
  cfg.audio = tower_.get();
  cfg.max_num_batched_tokens = 16;  // the clips' runs cut across chunks
  auto e = testing::make_engine(**m, nullptr, {}, pool_, 512, cfg);
  engine::EngineRequest r = testing::greedy_request("a", ids, 6);
  r.params.ignore_eos = true;
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] == 292 && ids[t - 1] != 292)
      r.mm_items.push_back(clip(r.mm_items.empty() ? 0 : 1, t));
  }
  ASSERT_EQ(r.mm_items.size(), 2u);
  engine::EngineRequest bad = r;
  bad.id = "bad";
  bad.mm_items[1].frames = 60;  // more frames than the features hold, and than the run
  EXPECT_FALSE(e->add_request(bad).ok());
  ASSERT_TRUE(e->add_request(r).ok());
  const auto done = testing::run_to_completion(*e);
  EXPECT_EQ(done.at("a").ids, i32("audio_greedy"));
  // An engine without an audio tower refuses the clips.
  auto deaf = testing::make_engine(**m, nullptr, {}, pool_, 512);
  EXPECT_FALSE(deaf->add_request(r).ok());
}

}  // namespace
}  // namespace qs
