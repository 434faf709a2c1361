// golden: a Qwen2.5-VL checkpoint quantized by the real auto-round 0.16.1 (its MLLM compressor,
// W4A16 g32 sym, text calibration; tests/golden/fixtures/vl_autoround, made by
// scripts/golden/gen_vl_autoround_fixture.py) loads with no flag: the decoder's 14 linears as
// int4 g32 packed weights, lm_head and the vision tower 16-bit (the tower's tensors are the
// float fixture's, byte for byte). With the tower's output given, the logits of a text and an
// image prompt and a greedy continuation over the KV cache match the tool's dequantized forward
// (transformers with auto-round's torch QuantLinear) within the text families' W4A16 tolerance
// (quant_golden_test.cc), and the greedy tokens are the tool's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/reference_tensors.h"
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "models/mrope.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures";
const fs::path kDir = kFixtures / "vl_autoround";

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

class VlAutoRound : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = models::Model::load((kDir / "qwen2_5_vl_w4g32").string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    std::ifstream in(kDir / "reference.json");
    meta_ = nlohmann::json::parse(in);
  }

  testing::ReferenceTensors ref_{kDir / "reference.safetensors"};
  nlohmann::json meta_;
  std::unique_ptr<models::Model> model_;
  ThreadPool pool_{2};
};

TEST_F(VlAutoRound, DecoderIsInt4AndTowerStays16Bit) {
  const models::ModelConfig& c = model_->config();
  EXPECT_EQ(c.family, models::Family::kQwen2_5_VL);
  int n_quantized = 0;
  for (const models::LinearInfo& info : model_->linears()) {
    if (info.name == "lm_head") {
      EXPECT_FALSE(info.scheme.quantized()) << info.scheme.describe();
      continue;
    }
    ++n_quantized;
    EXPECT_EQ(info.scheme.layout, formats::Layout::kGptq) << info.name;
    EXPECT_TRUE(info.scheme.zero_minus_one) << info.name;  // auto_round:auto_gptq
    EXPECT_EQ(info.scheme.bits, 4) << info.name;
    EXPECT_EQ(info.scheme.group_size, 32) << info.name;
    EXPECT_TRUE(info.scheme.sym) << info.name;
    ASSERT_NE(info.weight, nullptr);
    ASSERT_NE(info.weight->quant, nullptr) << info.name << " is resident as dense";
    EXPECT_TRUE(info.weight->quant->packed()) << info.name << ": " << info.weight->kernel();
  }
  EXPECT_EQ(n_quantized, 7 * c.n_layers);
  // The tower is nobody's to quantize: its tensors are the float fixture's, unchanged, and no
  // quantization_config rule makes them quantized.
  auto q = io::Checkpoint::open((kDir / "qwen2_5_vl_w4g32").string());
  auto f = io::Checkpoint::open((kFixtures / "vl/qwen2_5_vl").string());
  ASSERT_TRUE(q.ok() && f.ok());
  int n_tower = 0;
  for (const std::string& name : f->names()) {
    if (name.rfind("visual.", 0) != 0) continue;
    ++n_tower;
    auto a = q->get(name);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().to_string();
    const Tensor b = *f->get(name);
    ASSERT_EQ(a->shape, b.shape) << name;
    ASSERT_EQ(a->dtype, b.dtype) << name;
    EXPECT_EQ(std::memcmp(a->data, b.data, b.nbytes()), 0) << name;
    if (name.ends_with(".weight")) {
      const std::string module = name.substr(0, name.size() - 7);
      EXPECT_FALSE(model_->quant_config().scheme_for(module).quantized()) << module;
    }
  }
  EXPECT_GT(n_tower, 20);
}

// As quant_golden_test.cc's LogitsMatchTheTool. Our int kernels round each quantized linear's
// input to int8 per 32-block; the generator measured that on the tool's forward
// (<case>_int8_drift) and also recorded the tool's forward with exactly that rounding
// (<case>_int8_sim_logits). Tolerance: against the exact forward, twice the drift plus 1e-3 of
// the largest logit; against the rounded one (the sharp check), kSimTolerance of the largest
// logit, what is left being f32 summation order and the rare .5 tie. Greedy: our argmax equals
// the tool's token wherever the exact forward's top-2 gap exceeds twice the limit, and the
// rounded forward's argmax wherever its gap exceeds twice the sharp limit (the random tiny
// weights make the drift large next to the gaps, so that is the check that constrains most
// steps).
constexpr double kSimTolerance = 2e-3;

TEST_F(VlAutoRound, LogitsAndGreedyMatchTheToolsDequantizedForward) {
  const models::ModelConfig& c = model_->config();
  const int64_t vocab = c.vocab_size;
  int checked = 0, total = 0, same_as_tool = 0;
  for (const std::string name : {"text", "image"}) {
    const std::vector<int32_t> ids = ref_.i32(name + "_ids");
    const int64_t n = static_cast<int64_t>(ids.size());
    const std::vector<int32_t> greedy = ref_.i32(name + "_greedy");
    const int64_t steps = static_cast<int64_t>(greedy.size());
    const double drift = ref_.f32(name + "_int8_drift")[0];
    const double max_logit = meta_["qwen2_5_vl"][name]["max_abs_logit"].get<double>();
    const float tol = static_cast<float>(2 * drift + 1e-3 * max_logit);
    const float sim_tol = static_cast<float>(kSimTolerance * max_logit);
    const std::vector<float> sim = ref_.f32(name + "_int8_sim_logits");
    ASSERT_EQ(static_cast<int64_t>(sim.size()), (n + steps - 1) * vocab);

    std::vector<models::VisionGrid> grids;
    std::vector<float> embeds;
    if (name == "image") {
      grids.push_back({1, 4, 6});
      embeds = ref_.f32("image_image_embeds");
    }
    auto pos = models::mrope_positions(ids, c, grids, {});
    ASSERT_TRUE(pos.ok()) << pos.status().to_string();
    ASSERT_EQ(pos->positions, ref_.i32(name + "_positions"));
    engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim, (n + steps + 15) / 16, 16});
    ASSERT_TRUE(cache.reserve(0, n + steps).ok());
    models::ForwardBatch batch;
    batch.token_ids = ids;
    batch.seqs = {{0, n, 0, cache.block_table(0)}};
    batch.all_logits = true;
    batch.mrope_positions = pos->positions;
    if (!embeds.empty()) {
      const auto first = std::find(ids.begin(), ids.end(), c.image_token_id) - ids.begin();
      const int64_t count = static_cast<int64_t>(embeds.size()) / c.hidden_size;
      batch.embeddings.push_back({first, count, embeds.data()});
    }
    std::vector<float> logits;
    ASSERT_TRUE(model_->forward(batch, cache.layers(), pool_, &logits).ok());
    const std::vector<float> want = ref_.f32(name + "_logits");
    ASSERT_EQ(logits.size(), want.size());
    float prompt_err = 0, decode_err = 0, sim_err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      prompt_err = std::max(prompt_err, std::fabs(logits[i] - want[i]));
      sim_err = std::max(sim_err, std::fabs(logits[i] - sim[i]));
    }

    const std::vector<float> want_steps = ref_.f32(name + "_greedy_logits");
    std::vector<float> row(logits.end() - vocab, logits.end());
    for (int64_t s = 0; s < steps; ++s) {
      const float* exact = want_steps.data() + s * vocab;
      const float* rounded = sim.data() + (n - 1 + s) * vocab;
      for (int64_t j = 0; j < vocab; ++j) {
        decode_err = std::max(decode_err, std::fabs(row[j] - exact[j]));
        sim_err = std::max(sim_err, std::fabs(row[j] - rounded[j]));
      }
      const int64_t ours = std::max_element(row.begin(), row.end()) - row.begin();
      ++total;
      same_as_tool += ours == greedy[s];
      if (top2_margin(exact, vocab) > 2 * tol) {
        EXPECT_EQ(ours, greedy[s]) << name << " step " << s;
      }
      if (top2_margin(rounded, vocab) > 2 * sim_tol) {
        ++checked;
        EXPECT_EQ(ours, std::max_element(rounded, rounded + vocab) - rounded)
            << name << " step " << s;
      }
      // Teacher-forced: the tool's token feeds the next step.
      models::ForwardBatch step;
      step.token_ids = {greedy[s]};
      step.seqs = {{0, 1, n + s, cache.block_table(0)}};
      const int32_t p = static_cast<int32_t>(n + s + pos->delta);
      step.mrope_positions = {p, p, p};
      ASSERT_TRUE(model_->forward(step, cache.layers(), pool_, &row).ok());
    }
    std::printf(
        "%s: prompt max |d| %.4f, decode max |d| %.4f, limit %.4f (int8 drift %.4f); vs the "
        "int8-rounded forward max |d| %.2g (limit %.2g)\n",
        name.c_str(), prompt_err, decode_err, tol, drift, sim_err, sim_tol);
    EXPECT_LE(sim_err, sim_tol) << name;
    EXPECT_LE(prompt_err, tol) << name;
    EXPECT_LE(decode_err, tol) << name;
  }
  std::printf("greedy: %d of %d steps the tool's token; %d constrained by the sharp check\n",
              same_as_tool, total, checked);
  // The comparison must constrain the greedy path, not pass vacuously.
  EXPECT_GE(checked, total / 2);
}

}  // namespace
}  // namespace qs
