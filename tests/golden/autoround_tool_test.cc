// golden: quantserve's AutoRound against the `auto-round` pip package (0.16.1) on the same
// model (models/stories260K), the same calibration samples (token ids in the fixture, read as a
// pre-tokenized --dataset) and the same settings: per block the RTN (iteration 0) loss, the
// best loss, and the fake-quantized model's KL to the fp model on the same evaluation tokens;
// with --quant_lm_head (stories260K with its head untied) the same for lm_head after the blocks.
// The fixture is scripts/golden/gen_autoround_golden.py's; no torch is needed here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/fake_quant_model.h"
#include "../common/golden_fixtures.h"
#include "../common/untied_model.h"
#include "core/thread_pool.h"
#include "eval/perplexity.h"
#include "models/model.h"
#include "models/model_config.h"
#include "quant/pipeline.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kRoot = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/autoround_tool";
const std::string kStories = std::string(QS_SOURCE_DIR) + "/models/stories260K";

// Margins, from what differs between the two runs (fixtures/autoround_tool/README.md):
// - Block 0's RTN loss: the same inputs, f16 scales, codes and f32 block; only f32 summation
//   order differs (oneDNN vs our kernels). Measured 3e-4 relative at most; 1e-3 fails on any
//   difference in the quantizer (a scale, a clamp, a rounding rule) or in the loss positions.
// - Later blocks' RTN loss: their inputs are the quantized chain, the outputs of the blocks
//   already tuned, so the loss also holds the error those blocks pass on, which differs
//   between the tools by the best-loss differences below accumulated over the blocks before
//   (measured up to 7.1%, block 4 at W4).
// - Best loss after 200 SignSGD steps: each step moves every V by lr sign(g); a gradient
//   near zero takes either sign under a different summation order, and from there the two
//   trajectories differ by such flips (measured up to 4.7% with full batches). With 8 of 16
//   samples per step the batch order (the tool's random.shuffle vs our mt19937) differs
//   too, and each reported loss is a different mini-batch's.
// - KL: all of the above through 5 blocks (measured 11-12%, ours the lower at W4 and W2).
// - lm_head (the --quant_lm_head case): its loss is over 512 logits per position and holds
//   the error of all five tuned blocks passed through the final norm and the head, so it
//   compounds their differences (measured 11.0% on the RTN loss, 8.9% on the best). The tool
//   is not closer to itself: its blocks in this case and in w4g32_sym_full_batch see the same
//   inputs and settings and their best losses differ by up to 9.8% (block 1).
constexpr double kRtnRelBlock0 = 1e-3;
constexpr double kRelHead = 0.15;
constexpr double kRtnRelLater = 0.10;
constexpr double kBestRelFull = 0.10;
constexpr double kBestRelSampled = 0.20;
constexpr double kKlRelFull = 0.20;
constexpr double kKlRelSampled = 0.25;

class AutoRoundTool : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_artool_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

double rel(double ours, double tool) {
  return std::abs(ours - tool) / std::abs(tool);
}

TEST_P(AutoRoundTool, SameLossesAndKl) {
  const fs::path fixture = kRoot / GetParam();
  const json ref = json::parse(testing::slurp((fixture / "reference.json").string()));
  const json& s = ref["settings"];
  const bool full_batch = s["nsamples"] == s["batch_size"];

  // The lm_head case runs on stories260K with its head untied, as the generator does; the MoE
  // case on the model the generator made from it, committed beside its reference.
  const bool head = s.value("quant_lm_head", false);
  std::string model_dir = kStories;
  if (fs::exists(fixture / "model")) model_dir = (fixture / "model").string();
  if (head) {
    model_dir = dir_ + "/untied";
    testing::write_untied(kStories, model_dir);
  }
  quant::QuantizeOptions o;
  o.model_dir = model_dir;
  o.quant_lm_head = head;
  o.output_dir = dir_ + "/unused";
  o.dataset = (fixture / "calibration.jsonl").string();
  o.spec.bits = s["bits"];
  o.spec.group_size = s["group_size"];
  o.spec.sym = s["sym"];
  o.iters = s["iters"];
  o.nsamples = s["nsamples"];
  o.seqlen = s["seqlen"];
  o.batch_size = s["batch_size"];
  o.seed = s["seed"];
  // The fixtures' tool ran with amp=False (f32 products); so do we here.
  o.amp = s.value("amp", true);
  o.threads = 2;
  auto config = models::load_model_config(model_dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto plan = quant::plan_quantization(o, *config);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto tuned = quant::tune_model(o, *plan, nullptr, nullptr);
  ASSERT_TRUE(tuned.ok()) << tuned.status().to_string();
  // What the tool quantized: stories260K's 5 blocks x q, k, v, o (its MLP stays 16-bit); the
  // MoE model's 2 blocks x (q, k, v, o and 4 experts x 3); and lm_head when asked.
  EXPECT_EQ(tuned->weights.size(), ref["quantized_layers"].get<size_t>() + (head ? 1 : 0));
  EXPECT_NE(tuned->calibration.find("pre-tokenized"), std::string::npos) << tuned->calibration;

  const json& blocks = ref["blocks"];
  ASSERT_EQ(tuned->blocks.size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const quant::BlockReport& b = tuned->blocks[i];
    EXPECT_EQ(b.layer, blocks[i].value("layer", "")) << "entry " << i;
    const double tool_rtn = blocks[i]["initial_mse"], tool_best = blocks[i]["best_mse"];
    std::printf(
        "%s %zu: RTN loss ours %.6e tool %.6e; best ours %.6e (iter %d) tool %.6e "
        "(iter %d)\n",
        b.layer.empty() ? "block" : b.layer.c_str(), i, b.initial_loss, tool_rtn, b.best_loss,
        b.best_iter, tool_best, blocks[i]["best_iter"].get<int>());
    if (!b.layer.empty()) {
      EXPECT_LT(rel(b.initial_loss, tool_rtn), kRelHead) << b.layer;
      EXPECT_LT(rel(b.best_loss, tool_best), kRelHead) << b.layer;
      continue;
    }
    if (full_batch) {
      EXPECT_LT(rel(b.initial_loss, tool_rtn), i == 0 ? kRtnRelBlock0 : kRtnRelLater)
          << "block " << i;
    }
    EXPECT_LT(rel(b.best_loss, tool_best), full_batch ? kBestRelFull : kBestRelSampled)
        << "block " << i;
  }

  // KL of the fake-quant model (the tool measures its in-memory fake-quant model) on the
  // fixture's tokens, windows from an empty cache, as the generator computes it.
  testing::write_fake_quant(model_dir, *tuned, dir_ + "/fake");
  const json ev = json::parse(testing::slurp((kRoot / "eval_tokens.json").string()));
  auto fp = models::Model::load(model_dir);
  auto fq = models::Model::load(dir_ + "/fake");
  ASSERT_TRUE(fp.ok() && fq.ok());
  eval::EvalOptions eo;
  eo.seqlen = ev["seqlen"];
  ThreadPool pool(2);
  auto r = eval::evaluate(**fq, fp->get(), ev["tokens"].get<std::vector<int32_t>>(), eo, pool);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const double tool_kl = ref["kl_mean"];
  std::printf("KL ours %.6f tool %.6f\n", r->kl_mean, tool_kl);
  EXPECT_LT(rel(r->kl_mean, tool_kl), full_batch ? kKlRelFull : kKlRelSampled);
}

INSTANTIATE_TEST_SUITE_P(Cases, AutoRoundTool, ::testing::ValuesIn(testing::fixture_names(kRoot)));

TEST(AutoRoundToolFixtures, Present) {
  EXPECT_GE(testing::fixture_names(kRoot).size(), 4u);
}

}  // namespace
}  // namespace qs
