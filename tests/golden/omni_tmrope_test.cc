// golden: Qwen2.5-Omni's thinker on images, a video and a video with its sound track, against
// transformers on the random tiny thinker of tests/golden/fixtures/omni
// (scripts/golden/gen_omni_fixtures.py: tmrope_reference.*): the config's TMRoPE clock, the
// audio tower's output, the 3-D positions (get_rope_index: the largest position + 1 after each
// item, float32 temporal ticks, the sound track interleaved in 2 s chunks with shared bos/eos
// positions), the decoder's logits and greedy steps with the fixture's embeddings, and the same
// greedy tokens through the engine, whose prefix cache keys a video's span by its hash. Items
// that do not fit their placeholders are refused with an error.
//
// Both towers are the real ones: the thinker's vision tower (attn.q / .k / .v apart, stacked
// by vision::Qwen25VisionTower's loader) is held to transformers' rows for the image and the
// video first.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../common/engine_runner.h"
#include "../common/reference_tensors.h"
#include "audio/qwen2_5_omni_audio.h"
#include "engine/kv_cache.h"
#include "models/model.h"
#include "models/mrope.h"
#include "vision/qwen2_5_vl_vision.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/omni";
const std::string kModel = (kDir / "qwen2_5_omni_thinker").string();
constexpr int32_t kImage = 290, kVideo = 291, kAudio = 292;
const char* const kCases[] = {"image", "video", "audio_in_video"};

class OmniTmrope : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = models::Model::load(kModel);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto v = vision::Qwen25VisionTower::load(kModel);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    vision_ = std::make_unique<vision::Qwen25VisionTower>(std::move(*v));
    auto a = audio::Qwen25OmniAudioTower::load(kModel);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    audio_ = std::make_unique<audio::Qwen25OmniAudioTower>(std::move(*a));
  }
  const models::ModelConfig& config() const { return model_->config(); }
  std::vector<int32_t> ids(const std::string& c) const { return ref_.i32(c + "_ids"); }

  // The case's one item at its first placeholder: image 0, or video 0 at the case's seconds
  // per temporal patch, with clip 2 as its sound track for "audio_in_video".
  models::MultimodalItem item(const std::string& c, uint64_t hash = 1) const {
    const std::vector<int32_t> p = ids(c);
    const bool image = c == "image";
    models::MultimodalItem it;
    it.video = !image;
    it.offset = std::find(p.begin(), p.end(), image ? kImage : kVideo) - p.begin();
    const std::vector<int32_t> g = ref_.i32(image ? "image0_grid_thw" : "video0_grid_thw");
    it.grid = {g[0], g[1], g[2]};
    if (!image) it.grid.seconds_per_t = ref_.f32(c + "_second_per_grid")[0];
    it.pixels = std::make_shared<const std::vector<float>>(
        ref_.f32(image ? "image0_pixel_values" : "video0_pixel_values"));
    if (c == "audio_in_video") {
      const Tensor& f = ref_.at("clip2_features");
      it.frames = f.dim(1);
      it.features = std::make_shared<const std::vector<float>>(f.to_f32());
    }
    it.hash = hash;
    return it;
  }
  std::vector<models::MropeItem> placed(const std::string& c) const {
    const models::MultimodalItem it = item(c);
    return {it.mrope_item(it.frames > 0 ? audio_->tokens(it.frames) : 0)};
  }
  engine::EngineRequest request(const std::string& id, const std::string& c,
                                uint64_t hash = 1) const {
    engine::EngineRequest r = testing::greedy_request(id, ids(c), 6);
    r.params.ignore_eos = true;
    r.mm_items = {item(c, hash)};
    return r;
  }
  std::unique_ptr<engine::Engine> make(int64_t block_size = 16, int64_t budget = 2048,
                                       bool eyes = true, bool ears = true) {
    engine::EngineConfig cfg;
    cfg.vision = eyes ? vision_.get() : nullptr;
    cfg.audio = ears ? audio_.get() : nullptr;
    cfg.block_size = block_size;
    cfg.max_num_batched_tokens = budget;
    return testing::make_engine(*model_, nullptr, {}, pool_, 512, cfg);
  }

  testing::ReferenceTensors ref_{kDir / "tmrope_reference.safetensors"};
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<vision::Qwen25VisionTower> vision_;
  std::unique_ptr<audio::Qwen25OmniAudioTower> audio_;
  ThreadPool pool_{2};
};

TEST_F(OmniTmrope, ConfigCarriesTheClockAndTheMarkers) {
  EXPECT_EQ(config().family, models::Family::kQwen2_5_OmniThinker);
  EXPECT_EQ(config().position_id_per_seconds, 25);
  EXPECT_EQ(config().seconds_per_chunk, 2);
  EXPECT_EQ(config().audio_start_token_id, 293);
  EXPECT_EQ(config().audio_end_token_id, 294);
  EXPECT_EQ(config().vision_start_token_id, 288);
  EXPECT_EQ(config().vision_end_token_id, 289);
}

TEST_F(OmniTmrope, VisionTowerMatchesTransformersOnTheImageAndTheVideo) {
  ThreadPool pool(2);
  for (const char* name : {"image0", "video0"}) {
    SCOPED_TRACE(name);
    const std::vector<int32_t> g = ref_.i32(std::string(name) + "_grid_thw");
    const models::VisionGrid grid[] = {{g[0], g[1], g[2]}};
    std::vector<float> out;
    ASSERT_TRUE(
        vision_->encode(ref_.f32(std::string(name) + "_pixel_values").data(), grid, &out, pool)
            .ok());
    const std::vector<float> want = ref_.f32(std::string(name) + "_embeds");
    ASSERT_EQ(out.size(), want.size());
    float max_diff = 0;
    for (size_t i = 0; i < out.size(); ++i)
      max_diff = std::max(max_diff, std::abs(out[i] - want[i]));
    EXPECT_LE(max_diff, 1e-4f);
  }
}

TEST_F(OmniTmrope, AudioTowerMatchesTransformersOnALongClip) {
  const Tensor& f = ref_.at("clip2_features");
  std::vector<float> out;
  ASSERT_TRUE(audio_->encode(f.to_f32().data(), f.dim(1), &out, pool_).ok());
  const std::vector<float> want = ref_.f32("clip2_embeds");
  ASSERT_EQ(out.size(), want.size());
  EXPECT_EQ(testing::count_off(out.data(), want.data(), want.size()), 0);
}

TEST_F(OmniTmrope, PositionsAreTransformersRopeIndex) {
  for (const std::string c : kCases) {
    auto p = models::mrope_positions(ids(c), config(), placed(c));
    ASSERT_TRUE(p.ok()) << c << ": " << p.status().to_string();
    EXPECT_EQ(p->positions, ref_.i32(c + "_positions")) << c;
    EXPECT_EQ(p->delta, ref_.i32(c + "_rope_delta")[0]) << c;
  }
  // From the runs alone, for the items that are one run each.
  const std::vector<int32_t> g = ref_.i32("image0_grid_thw");
  const models::VisionGrid image[] = {{g[0], g[1], g[2]}};
  auto p = models::mrope_positions(ids("image"), config(), image, {});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->positions, ref_.i32("image_positions"));
  const models::VisionGrid video[] = {item("video").grid};
  p = models::mrope_positions(ids("video"), config(), {}, video);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->positions, ref_.i32("video_positions"));

  // 0.58 s a patch at 25 ticks a second: the third frame is float32's 29 ticks past the start
  // (position 4), not the 28 of exact arithmetic; the text after resumes past it.
  const std::vector<int32_t> v = ref_.i32("video_positions");
  EXPECT_EQ(v[8], 4 + 29);
  EXPECT_EQ(v[10], 4 + 29 + 1);
  // The sound track at 1.8 s a patch: video ticks 0, 45 | 90 and audio 0-49 | 50-54 make two
  // chunks, video first; the eos pair takes the last chunk's largest + 1 (the audio's 4 + 54),
  // below the video's 4 + 90, which still sets the delta.
  const std::vector<models::MropeItem> av = placed("audio_in_video");
  auto chunks = models::audio_in_video_chunks(config(), av[0].grid, av[0].audio_tokens);
  ASSERT_TRUE(chunks.ok());
  ASSERT_EQ(chunks->size(), 2u);
  EXPECT_EQ((*chunks)[0].video, 4);
  EXPECT_EQ((*chunks)[0].audio, 50);
  EXPECT_EQ((*chunks)[1].video, 2);
  EXPECT_EQ((*chunks)[1].audio, 5);
  const std::vector<int32_t> a = ref_.i32("audio_in_video_positions");
  const int64_t n = static_cast<int64_t>(ids("audio_in_video").size());
  EXPECT_EQ(a[3], a[4]);  // <|vision_bos|><|audio_bos|>
  EXPECT_EQ(a[n - 5], 4 + 54 + 1);
  EXPECT_EQ(a[n - 4], a[n - 5]);  // <|audio_eos|><|vision_eos|>
  EXPECT_EQ(ref_.i32("audio_in_video_rope_delta")[0], 4 + 90 + 1 - n);
}

// Scatters `rows` over the placeholders `id` of `ids` in order, one span per run.
void scatter(const std::vector<int32_t>& ids, int32_t id, const std::vector<float>& rows,
             int64_t hidden, models::ForwardBatch* batch) {
  const int64_t n = static_cast<int64_t>(ids.size());
  int64_t used = 0;
  for (int64_t t = 0; t < n;) {
    int64_t end = t;
    while (end < n && ids[end] == id) ++end;
    if (end > t) batch->embeddings.push_back({t, end - t, rows.data() + used * hidden});
    used += end - t;
    t = std::max(end, t + 1);
  }
  ASSERT_EQ(used * hidden, static_cast<int64_t>(rows.size()));
}

TEST_F(OmniTmrope, PromptLogitsAndGreedyStepsMatchTransformers) {
  const models::ModelConfig& c = config();
  const std::vector<float> image = ref_.f32("image0_embeds"), video = ref_.f32("video0_embeds"),
                           sound = ref_.f32("clip2_embeds");
  for (const std::string name : kCases) {
    const std::vector<int32_t> p = ids(name);
    const int64_t n = static_cast<int64_t>(p.size()), steps = 6;
    auto pos = models::mrope_positions(p, c, placed(name));
    ASSERT_TRUE(pos.ok()) << pos.status().to_string();
    engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim, (n + steps + 15) / 16, 16});
    ASSERT_TRUE(cache.reserve(0, n + steps).ok());
    models::ForwardBatch batch;
    batch.token_ids = p;
    batch.seqs = {{0, n, 0, cache.block_table(0)}};
    batch.all_logits = true;
    batch.mrope_positions = pos->positions;
    if (name == "image") scatter(p, kImage, image, c.hidden_size, &batch);
    if (name != "image") scatter(p, kVideo, video, c.hidden_size, &batch);
    if (name == "audio_in_video") scatter(p, kAudio, sound, c.hidden_size, &batch);
    std::vector<float> logits;
    ASSERT_TRUE(model_->forward(batch, cache.layers(), pool_, &logits).ok());
    const std::vector<float> want = ref_.f32(name + "_logits");
    ASSERT_EQ(logits.size(), want.size());
    EXPECT_EQ(testing::count_off(logits.data(), want.data(), want.size()), 0) << name;

    const std::vector<int32_t> greedy = ref_.i32(name + "_greedy");
    const std::vector<float> greedy_logits = ref_.f32(name + "_greedy_logits");
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
      const int32_t at = static_cast<int32_t>(n + s + pos->delta);
      step.mrope_positions = {at, at, at};
      ASSERT_TRUE(model_->forward(step, cache.layers(), pool_, &row).ok());
    }
  }
}

TEST_F(OmniTmrope, ThroughTheEngineGiveTransformersGreedyTokens) {
  // 7 tokens a step cut the interleaved chunks of the video and its sound across prefill
  // chunks, next to the other requests.
  for (int64_t budget : {2048, 7}) {
    auto e = make(16, budget);
    for (const std::string c : kCases) ASSERT_TRUE(e->add_request(request(c, c)).ok()) << c;
    const auto done = testing::run_to_completion(*e);
    for (const std::string c : kCases) {
      EXPECT_TRUE(done.at(c).error.ok()) << c << ": " << done.at(c).error.to_string();
      EXPECT_EQ(done.at(c).ids, ref_.i32(c + "_greedy")) << c << " budget " << budget;
    }
  }
}

TEST_F(OmniTmrope, PrefixCacheKeysTheVideoAndItsSoundByTheirHash) {
  auto e = make(/*block_size=*/4);
  ASSERT_TRUE(e->add_request(request("a", "audio_in_video", 7)).ok());
  const auto first = testing::run_to_completion(*e);
  const int64_t n = static_cast<int64_t>(ids("audio_in_video").size());
  ASSERT_TRUE(e->add_request(request("b", "audio_in_video", 7)).ok());
  const auto same = testing::run_to_completion(*e);
  EXPECT_EQ(same.at("b").num_cached_tokens, (n - 1) / 4 * 4);
  EXPECT_EQ(same.at("b").ids, first.at("a").ids);
  // The cache held every row of the video and its sound: neither tower ran for "b".
  EXPECT_EQ(e->stats().mm_items_encoded, 1);
  EXPECT_EQ(e->stats().mm_items_cached, 1);
  // Another hash: only the block before the span (which starts at token 5) is shared.
  ASSERT_TRUE(e->add_request(request("c", "audio_in_video", 8)).ok());
  const auto other = testing::run_to_completion(*e);
  EXPECT_EQ(other.at("c").num_cached_tokens, 4);
  EXPECT_EQ(other.at("c").ids, first.at("a").ids);  // the same inputs, whatever the hash
  EXPECT_EQ(e->stats().mm_items_encoded, 2);
}

TEST_F(OmniTmrope, ItemsThatDoNotFitTheirPlaceholdersAreRefused) {
  auto e = make();
  const std::string av = "audio_in_video";
  auto refused = [&](const engine::EngineRequest& r, const std::string& why) {
    const Status s = e->add_request(r);
    EXPECT_FALSE(s.ok()) << why;
    EXPECT_FALSE(s.message().empty()) << why;
  };
  engine::EngineRequest r = request("r", av);
  const int64_t at = r.mm_items[0].offset;
  std::swap(r.prompt_ids[at + 3], r.prompt_ids[at + 4]);  // a video and an audio placeholder
  refused(r, "chunks out of order");
  r = request("r", av);
  r.prompt_ids[at - 1] = 7;  // no <|audio_bos|>
  refused(r, "no audio bos");
  r = request("r", av);
  r.prompt_ids[at + 61] = 7;  // no <|audio_eos|>
  refused(r, "no audio eos");
  r = request("r", av);
  r.mm_items[0].frames = 200;  // 50 audio tokens: another layout
  r.mm_items[0].features = std::make_shared<const std::vector<float>>(128 * 200, 0.0f);
  refused(r, "a shorter sound track");
  r = request("r", av);
  r.mm_items[0].features = std::make_shared<const std::vector<float>>(128 * 10, 0.0f);
  refused(r, "features that do not fill the frames");
  r = request("r", av);
  r.mm_items[0].frames = 0;  // a silent video over audio placeholders
  r.mm_items[0].features.reset();
  refused(r, "audio placeholders in a silent video");
  r = request("r", av);
  r.mm_items[0].offset += 1;
  refused(r, "off by one");
  r = request("r", "video");
  r.mm_items.push_back(item("image"));  // after the video, over text
  refused(r, "an image over text");
  r = request("r", "image");
  r.mm_items[0].grid.w = 2;  // one token over a run of two
  refused(r, "a short image");
  EXPECT_TRUE(e->add_request(request("ok", av)).ok());
  // Without the audio tower, or the vision tower, the video and its sound are refused.
  auto deaf = make(16, 2048, true, false);
  EXPECT_FALSE(deaf->add_request(request("r", av)).ok());
  EXPECT_TRUE(deaf->add_request(request("v", "video")).ok());
  auto blind = make(16, 2048, false, true);
  EXPECT_FALSE(blind->add_request(request("r", av)).ok());
}

}  // namespace
}  // namespace qs
