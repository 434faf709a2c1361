// golden: the full Qwen2.5-Omni checkpoint layout (thinker.* beside talker.* and token2wav.*,
// config.json's thinker_config; tests/golden/fixtures/omni_full, made by
// scripts/golden/gen_omni_full_fixture.py from the tiny thinker fixture) loads its thinker with
// no flag. 16-bit: the decoder and both towers read the thinker fixture's own weights through
// the "thinker." view, the logits of a text prompt and of ../omni's two-clip audio prompt equal
// transformers' (the full model's thinker) and the thinker fixture's, the load reports the
// talker and token2wav as present and not run, and `generate` prints what it prints on the
// thinker fixture. W4A16 (the real auto-round 0.16.1's packed thinker decoder under
// "thinker.", its quantization_config naming thinker.* modules): the decoder loads int4, the
// towers, lm_head, talker and token2wav stay 16-bit, and the logits match the tool's
// dequantized forward within vl_autoround_test.cc's tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/engine_runner.h"
#include "../common/reference_tensors.h"
#include "audio/qwen2_5_omni_audio.h"
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "io/checkpoint.h"
#include "models/component.h"
#include "models/model.h"
#include "models/mrope.h"
#include "vision/qwen2_5_vl_vision.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures";
const fs::path kDir = kFixtures / "omni_full";
const fs::path kFull = kDir / "qwen2_5_omni";
const fs::path kW4 = kDir / "qwen2_5_omni_w4g32";
const fs::path kThinker = kFixtures / "omni/qwen2_5_omni_thinker";
constexpr int32_t kAudio = 292;

std::unique_ptr<models::Model> load(const fs::path& dir) {
  auto m = models::Model::load(dir.string());
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

// The tensors of `dir` whose names start with `prefix`.
int64_t count_under(const io::Checkpoint& ckpt, const std::string& prefix) {
  const std::vector<std::string> names = ckpt.names();
  return std::count_if(names.begin(), names.end(),
                       [&](const std::string& n) { return n.starts_with(prefix); });
}

// The audio prompt of ../omni/reference.safetensors: its clips' runs of <|AUDIO|> filled with
// the audio tower's output.
struct Prompt {
  std::vector<int32_t> ids;
  std::vector<float> embeds;                      // every clip's rows, in prompt order
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first position, rows) per clip
};

Prompt audio_prompt(const testing::ReferenceTensors& ref, const audio::Qwen25OmniAudioTower& tower,
                    ThreadPool& pool) {
  Prompt p;
  p.ids = ref.i32("audio_ids");
  int clip = 0;
  for (size_t t = 0; t < p.ids.size(); ++t) {
    if (p.ids[t] != kAudio || p.ids[t - 1] == kAudio) continue;
    const Tensor& f = ref.at("clip" + std::to_string(clip++) + "_features");
    std::vector<float> out;
    EXPECT_TRUE(tower.encode(f.to_f32().data(), f.dim(1), &out, pool).ok());
    p.runs.emplace_back(static_cast<int64_t>(t), static_cast<int64_t>(out.size()) / 64);
    p.embeds.insert(p.embeds.end(), out.begin(), out.end());
  }
  EXPECT_EQ(clip, 2);
  return p;
}

// The prompt's logits [n, vocab] (3-D positions as mrope_positions gives them), then `steps`
// greedy steps over the cache fed `feed` (teacher-forced) into `step_logits`.
struct PromptRun {
  std::vector<float> logits, step_logits;
};

PromptRun run(const models::Model& model, const Prompt& p, const std::vector<int32_t>& feed,
              ThreadPool& pool) {
  const models::ModelConfig& c = model.config();
  const int64_t n = static_cast<int64_t>(p.ids.size());
  const int64_t steps = static_cast<int64_t>(feed.size());
  PromptRun r;
  auto pos = models::mrope_positions(p.ids, c, {}, {});
  EXPECT_TRUE(pos.ok()) << pos.status().to_string();
  if (!pos.ok()) return r;
  engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim, (n + steps + 15) / 16, 16});
  EXPECT_TRUE(cache.reserve(0, n + steps).ok());
  models::ForwardBatch batch;
  batch.token_ids = p.ids;
  batch.seqs = {{0, n, 0, cache.block_table(0)}};
  batch.all_logits = true;
  batch.mrope_positions = pos->positions;
  int64_t row = 0;
  for (const auto& [first, count] : p.runs) {
    batch.embeddings.push_back({first, count, p.embeds.data() + row * c.hidden_size});
    row += count;
  }
  EXPECT_TRUE(model.forward(batch, cache.layers(), pool, &r.logits).ok());
  std::vector<float> last(r.logits.end() - c.vocab_size, r.logits.end());
  for (int64_t s = 0; s < steps; ++s) {
    r.step_logits.insert(r.step_logits.end(), last.begin(), last.end());
    models::ForwardBatch step;
    step.token_ids = {feed[s]};
    step.seqs = {{0, 1, n + s, cache.block_table(0)}};
    const int32_t q = static_cast<int32_t>(n + s + pos->delta);
    step.mrope_positions = {q, q, q};
    EXPECT_TRUE(model.forward(step, cache.layers(), pool, &last).ok());
  }
  return r;
}

std::vector<int32_t> argmax_rows(const std::vector<float>& rows, int64_t vocab) {
  std::vector<int32_t> out;
  for (size_t i = 0; i + vocab <= rows.size(); i += vocab) {
    out.push_back(static_cast<int32_t>(
        std::max_element(rows.begin() + i, rows.begin() + i + vocab) - (rows.begin() + i)));
  }
  return out;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

float top2_margin(const float* row, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  return a - b;
}

class OmniFull : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto a = audio::Qwen25OmniAudioTower::load(kFull.string());
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    audio_ = new audio::Qwen25OmniAudioTower(std::move(*a));
  }
  static void TearDownTestSuite() {
    delete audio_;
    audio_ = nullptr;
  }

  testing::ReferenceTensors ref_{kDir / "reference.safetensors"};
  testing::ReferenceTensors thinker_ref_{kFixtures / "omni/reference.safetensors"};
  static audio::Qwen25OmniAudioTower* audio_;
  ThreadPool pool_{2};
};
audio::Qwen25OmniAudioTower* OmniFull::audio_ = nullptr;

TEST_F(OmniFull, LoadsTheThinkerAndReportsTheTalkerAndToken2wavNotRun) {
  auto model = load(kFull);
  ASSERT_NE(model, nullptr);
  const models::ModelConfig& c = model->config();
  EXPECT_EQ(c.architecture, "Qwen2_5OmniThinkerForConditionalGeneration");
  EXPECT_EQ(c.family, models::Family::kQwen2_5_OmniThinker);
  EXPECT_EQ(c.container_architecture, "Qwen2_5OmniForConditionalGeneration");
  EXPECT_EQ(c.tensor_prefix, "thinker.");
  EXPECT_EQ(c.audio_token_id, kAudio);
  EXPECT_EQ(c.image_token_id, 290);
  // The parts beside the thinker, counted from the stored (sharded) checkpoint.
  auto stored = io::Checkpoint::open(kFull.string());
  ASSERT_TRUE(stored.ok()) << stored.status().to_string();
  ASSERT_EQ(c.skipped_parts.size(), 2u);
  for (const models::SkippedPart& p : c.skipped_parts) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(p.prefix, p.name + ".");
    EXPECT_EQ(p.n_tensors, count_under(*stored, p.prefix));
    EXPECT_GT(p.n_tensors, 10);
    EXPECT_GT(p.n_bytes, 1000u);
  }
  EXPECT_EQ(c.skipped_parts[0].name, "talker");
  EXPECT_EQ(c.skipped_parts[1].name, "token2wav");
  // The thinker's tensors are the thinker fixture's, byte for byte, under their usual names.
  auto view = stored->rooted("thinker.");
  auto fixture = io::Checkpoint::open(kThinker.string());
  ASSERT_TRUE(view.ok() && fixture.ok());
  EXPECT_EQ(view->names(), fixture->names());
  for (const std::string& name : fixture->names()) {
    const Tensor a = *view->get(name), b = *fixture->get(name);
    ASSERT_EQ(a.shape, b.shape) << name;
    EXPECT_EQ(std::memcmp(a.data, b.data, b.nbytes()), 0) << name;
    EXPECT_EQ(stored->file_of("thinker." + name), view->file_of(name));
  }
  for (const models::LinearInfo& info : model->linears()) {
    EXPECT_FALSE(info.scheme.quantized()) << info.name;
  }
}

TEST_F(OmniFull, RootedViewsNameTheStoredTensor) {
  auto stored = io::Checkpoint::open(kFull.string());
  ASSERT_TRUE(stored.ok());
  auto view = stored->rooted("thinker.");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->root(), "thinker.");
  EXPECT_TRUE(view->has("lm_head.weight"));
  EXPECT_FALSE(view->has("thinker.lm_head.weight"));
  EXPECT_FALSE(view->has("talker.codec_head.weight"));
  auto missing = view->get("model.layers.9.mlp.up_proj.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'thinker.model.layers.9.mlp.up_proj.weight'"),
            std::string::npos)
      << missing.status().message();
  auto shape = view->get("model.norm.weight", {65});
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("'thinker.model.norm.weight'"), std::string::npos)
      << shape.status().message();
  auto none = stored->rooted("speaker.");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("'speaker.'"), std::string::npos);
}

TEST_F(OmniFull, TextAndAudioLogitsEqualTheThinkerFixtureAndTransformers) {
  auto full = load(kFull);
  auto thinker = load(kThinker);
  ASSERT_TRUE(full && thinker);
  const int64_t vocab = full->config().vocab_size;
  // Text: transformers' full model (its thinker), and the thinker fixture run here.
  Prompt text;
  text.ids = ref_.i32("text_ids");
  const std::vector<int32_t> text_greedy = ref_.i32("text_greedy");
  const PromptRun a = run(*full, text, text_greedy, pool_);
  const PromptRun b = run(*thinker, text, text_greedy, pool_);
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.step_logits, b.step_logits);
  const std::vector<float> want = ref_.f32("text_logits");
  ASSERT_EQ(a.logits.size(), want.size());
  EXPECT_EQ(testing::count_off(a.logits.data(), want.data(), want.size()), 0);
  const std::vector<float> want_steps = ref_.f32("text_greedy_logits");
  EXPECT_EQ(testing::count_off(a.step_logits.data(), want_steps.data(), want_steps.size()), 0);
  EXPECT_EQ(argmax_rows(a.step_logits, vocab), text_greedy);

  // Audio: ../omni's two-clip prompt, the clips encoded by the tower read from "thinker.".
  const Prompt audio = audio_prompt(thinker_ref_, *audio_, pool_);
  const std::vector<int32_t> audio_greedy = thinker_ref_.i32("audio_greedy");
  EXPECT_EQ(ref_.i32("audio_greedy"), audio_greedy);
  const PromptRun c = run(*full, audio, audio_greedy, pool_);
  const std::vector<float> want_audio = thinker_ref_.f32("audio_logits");
  ASSERT_EQ(c.logits.size(), want_audio.size());
  EXPECT_EQ(testing::count_off(c.logits.data(), want_audio.data(), want_audio.size()), 0);
  const std::vector<float> want_audio_steps = thinker_ref_.f32("audio_greedy_logits");
  EXPECT_EQ(
      testing::count_off(c.step_logits.data(), want_audio_steps.data(), want_audio_steps.size()),
      0);
  EXPECT_EQ(argmax_rows(c.step_logits, vocab), audio_greedy);
}

TEST_F(OmniFull, TowersLoadFromThePrefixedNames) {
  auto component = models::Component::open(kFull.string());
  ASSERT_TRUE(component.ok()) << component.status().to_string();
  EXPECT_EQ(component->tensor_prefix(), "thinker.");
  EXPECT_TRUE(component->config().contains("vision_config"));
  EXPECT_TRUE(component->has("audio_tower.conv1.weight"));
  EXPECT_FALSE(component->has("talker.codec_head.weight"));
  // The audio tower: ../omni's clips to transformers' embeddings.
  for (int i : {0, 1}) {
    const Tensor& f = thinker_ref_.at("clip" + std::to_string(i) + "_features");
    std::vector<float> out;
    ASSERT_TRUE(audio_->encode(f.to_f32().data(), f.dim(1), &out, pool_).ok());
    const std::vector<float> want = thinker_ref_.f32("clip" + std::to_string(i) + "_embeds");
    ASSERT_EQ(out.size(), want.size());
    EXPECT_EQ(testing::count_off(out.data(), want.data(), want.size()), 0) << i;
  }
  // The vision tower: ../omni's TMRoPE image to transformers' merged patches.
  auto vision = vision::Qwen25VisionTower::load(kFull.string());
  ASSERT_TRUE(vision.ok()) << vision.status().to_string();
  testing::ReferenceTensors tm(kFixtures / "omni/tmrope_reference.safetensors");
  const std::vector<int32_t> g = tm.i32("image0_grid_thw");
  const models::VisionGrid grid[] = {{g[0], g[1], g[2]}};
  std::vector<float> out;
  ASSERT_TRUE(vision->encode(tm.f32("image0_pixel_values").data(), grid, &out, pool_).ok());
  const std::vector<float> want = tm.f32("image0_embeds");
  ASSERT_EQ(out.size(), want.size());
  EXPECT_LE(max_diff(out, want), 1e-4f);
}

TEST_F(OmniFull, GenerateOnTheFullDirectoryPrintsTheThinkersCompletion) {
  const std::string args =
      " --prompt 'Hello, world' --max-tokens 6 --temperature 0 --ignore-eos --threads 2";
  const testing::CliResult full =
      testing::run_cli("generate --model " + kFull.string() + args, /*stderr_too=*/false);
  const testing::CliResult thinker =
      testing::run_cli("generate --model " + kThinker.string() + args, /*stderr_too=*/false);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ASSERT_EQ(thinker.exit_code, 0) << thinker.output;
  EXPECT_FALSE(full.output.empty());
  EXPECT_EQ(full.output, thinker.output);
  // The log says what runs and what does not.
  setenv("QS_LOG_LEVEL", "info", 1);  // the report is an info line
  const testing::CliResult logged =
      testing::run_cli("generate --model " + kFull.string() + args, /*stderr_too=*/true);
  EXPECT_NE(logged.output.find("not run: talker (talker.*"), std::string::npos) << logged.output;
  EXPECT_NE(logged.output.find("token2wav (token2wav.*"), std::string::npos) << logged.output;
}

// vl_autoround_test.cc's tolerance (its comment gives the reasoning): against the tool's exact
// dequantized forward, twice the measured int8 drift plus 1e-3 of the largest logit; against
// that forward with quantserve's int8 activation rounding, kSimTolerance of the largest logit.
constexpr double kSimTolerance = 2e-3;

TEST_F(OmniFull, W4A16LoadsWithNoFlagAndMatchesTheToolsDequantizedForward) {
  auto model = load(kW4);
  ASSERT_NE(model, nullptr);
  const models::ModelConfig& c = model->config();
  EXPECT_EQ(c.tensor_prefix, "thinker.");
  EXPECT_EQ(model->quant_config().root(), "thinker.");
  int n_quantized = 0;
  for (const models::LinearInfo& info : model->linears()) {
    if (info.name == "lm_head") {
      EXPECT_FALSE(info.scheme.quantized()) << info.scheme.describe();
      continue;
    }
    ++n_quantized;
    EXPECT_EQ(info.scheme.layout, formats::Layout::kGptq) << info.name;
    EXPECT_EQ(info.scheme.bits, 4) << info.name;
    EXPECT_EQ(info.scheme.group_size, 32) << info.name;
    ASSERT_NE(info.weight, nullptr);
    ASSERT_NE(info.weight->quant, nullptr) << info.name << " is resident as dense";
  }
  EXPECT_EQ(n_quantized, 7 * c.n_layers);
  // Everything outside the thinker's decoder is the 16-bit checkpoint's, byte for byte, and
  // no rule of the (thinker.-named) config makes a tower linear quantized.
  auto q = io::Checkpoint::open(kW4.string());
  auto f = io::Checkpoint::open(kFull.string());
  ASSERT_TRUE(q.ok() && f.ok());
  int n_kept = 0;
  for (const std::string& name : f->names()) {
    if (name.starts_with("thinker.model.layers.") && name.find("_proj.weight") != std::string::npos)
      continue;
    ++n_kept;
    auto a = q->get(name);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    const Tensor b = *f->get(name);
    ASSERT_EQ(a->shape, b.shape) << name;
    EXPECT_EQ(std::memcmp(a->data, b.data, b.nbytes()), 0) << name;
    // The decoder's norms sit inside the quantized blocks; the other thinker modules do not.
    if (name.starts_with("thinker.") && !name.starts_with("thinker.model.layers.") &&
        name.ends_with(".weight")) {
      const std::string module = name.substr(8, name.size() - 8 - 7);
      EXPECT_FALSE(model->quant_config().scheme_for(module).quantized()) << module;
    }
  }
  EXPECT_GT(n_kept, 150);
  EXPECT_TRUE(model->quant_config().scheme_for("model.layers.1.mlp.down_proj").quantized());

  std::ifstream in(kDir / "reference.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  const int64_t vocab = c.vocab_size;
  int checked = 0, total = 0;
  for (const std::string name : {"text", "audio"}) {
    SCOPED_TRACE(name);
    Prompt p;
    if (name == "text") {
      p.ids = ref_.i32("text_ids");
    } else {
      // The audio tower is 16-bit: its output is the float model's.
      p = audio_prompt(thinker_ref_, *audio_, pool_);
    }
    const int64_t n = static_cast<int64_t>(p.ids.size());
    const std::vector<int32_t> greedy = ref_.i32("w4_" + name + "_greedy");
    const int64_t steps = static_cast<int64_t>(greedy.size());
    const double drift = ref_.f32("w4_" + name + "_int8_drift")[0];
    const double max_logit = meta["w4_" + name]["max_abs_logit"].get<double>();
    const float tol = static_cast<float>(2 * drift + 1e-3 * max_logit);
    const float sim_tol = static_cast<float>(kSimTolerance * max_logit);
    const std::vector<float> sim = ref_.f32("w4_" + name + "_int8_sim_logits");
    ASSERT_EQ(static_cast<int64_t>(sim.size()), (n + steps - 1) * vocab);
    const PromptRun r = run(*model, p, greedy, pool_);
    const float prompt_err = max_diff(r.logits, ref_.f32("w4_" + name + "_logits"));
    const float decode_err = max_diff(r.step_logits, ref_.f32("w4_" + name + "_greedy_logits"));
    float sim_err = 0;
    for (int64_t i = 0; i < n * vocab; ++i)
      sim_err = std::max(sim_err, std::fabs(r.logits[i] - sim[i]));
    const std::vector<float> exact_steps = ref_.f32("w4_" + name + "_greedy_logits");
    for (int64_t s = 0; s < steps; ++s) {
      const float* ours = r.step_logits.data() + s * vocab;
      const float* exact = exact_steps.data() + s * vocab;
      const float* rounded = sim.data() + (n - 1 + s) * vocab;
      for (int64_t j = 0; j < vocab; ++j)
        sim_err = std::max(sim_err, std::fabs(ours[j] - rounded[j]));
      const int64_t top = std::max_element(ours, ours + vocab) - ours;
      ++total;
      if (top2_margin(exact, vocab) > 2 * tol) {
        EXPECT_EQ(top, greedy[s]) << "step " << s;
      }
      if (top2_margin(rounded, vocab) > 2 * sim_tol) {
        ++checked;
        EXPECT_EQ(top, std::max_element(rounded, rounded + vocab) - rounded) << "step " << s;
      }
    }
    std::printf(
        "%s: prompt max |d| %.4f, decode max |d| %.4f, limit %.4f (int8 drift %.4f); vs the "
        "int8-rounded forward max |d| %.2g (limit %.2g)\n",
        name.c_str(), prompt_err, decode_err, tol, drift, sim_err, sim_tol);
    EXPECT_LE(sim_err, sim_tol);
    EXPECT_LE(prompt_err, tol);
    EXPECT_LE(decode_err, tol);
  }
  std::printf("greedy: %d of %d steps constrained by the sharp check\n", checked, total);
  EXPECT_GE(checked, total / 2);
}

}  // namespace
}  // namespace qs
