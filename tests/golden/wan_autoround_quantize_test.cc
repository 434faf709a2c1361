// golden: AutoRound of Wan2.2 transformers (issue 33). First the tuner's Wan block
// (quant/wan_block.h) against the inference path: the float forward of every block of the
// t2v_a14b and ti2v_5b fixtures' transformers (f32 copies), fed the inputs and conditioning
// WanTransformer::forward hands its WanBlockTap, gives the next block's input. Then `quantize
// --iters 20 --nsamples 4 --group_size 32` on tiny_autoround_w4g32's widened bf16 pair (in
// t2v_a14b's pipeline): it finishes, writes both experts with auto-round's quantization_config
// (iters 20), loads with no flag, every block's reconstruction loss on the whole calibration set
// is below RTN's, and each expert's forward is closer to the 16-bit source than RTN's output is
// (auto-round's own 50-iteration output of the same pair is measured beside it).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "core/json.h"
#include "diffusion/wan_transformer.h"
#include "io/checkpoint.h"
#include "models/component.h"
#include "ops/linear.h"
#include "quant/wan_block.h"
#include "wan_reference.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

const fs::path kTool = testing::kWanFixtures / "tiny_autoround_w4g32";
const std::vector<std::string> kExperts = {"transformer", "transformer_2"};

// A copy of the transformer directory `from` with every tensor f32, so that inference runs f32
// arithmetic throughout (16-bit weights take bf16 activations) and the comparison with the
// tuner's f32 block is one of float rounding only.
void write_f32_copy(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy_file(from / "config.json", to / "config.json", fs::copy_options::overwrite_existing);
  auto ckpt = io::Checkpoint::open(from.string(), "diffusion_pytorch_model");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : ckpt->names()) {
    const Tensor t = ckpt->get(name).value();
    tensors.emplace_back(name, Tensor::from_f32(DType::kF32, t.shape, t.to_f32()));
  }
  ASSERT_TRUE(
      io::write_safetensors((to / "diffusion_pytorch_model.safetensors").string(), tensors).ok());
}

class WanBlockForward : public ::testing::TestWithParam<std::string> {};

TEST_P(WanBlockForward, EqualsTheInferenceBlocks) {
  const std::string fixture = GetParam();
  const fs::path dir =
      fs::temp_directory_path() / ("qs_wan_block_" + fixture + "_" + std::to_string(::getpid()));
  write_f32_copy(fs::path(testing::wan_pipeline(fixture)) / "transformer", dir);
  auto model = diffusion::WanTransformer::load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const diffusion::WanTransformerConfig& f = model->config();
  const testing::WanReference ref(fixture);
  const int batch = 2;
  testing::WanReferenceInputs in(ref, batch);
  // Tell the items apart: the second with other latents and text.
  const size_t half_l = in.latents.size() / 2, half_t = in.text.size() / 2;
  for (size_t i = half_l; i < in.latents.size(); ++i) in.latents[i] *= -0.5f;
  for (size_t i = half_t; i < in.text.size(); ++i) in.text[i] = std::sin(in.text[i] * 3.0f);

  const int64_t d = f.inner_dim();
  diffusion::WanBlockTap::Conditioning cond;
  std::vector<float> tproj, text, cos, sin;
  std::vector<int64_t> mod_index;
  std::vector<std::vector<float>> inputs;
  diffusion::WanBlockTap tap;
  tap.conditioning = [&](const diffusion::WanBlockTap::Conditioning& c) {
    cond = c;
    tproj.assign(c.timestep_proj, c.timestep_proj + c.n_distinct * 6 * d);
    mod_index.assign(c.mod_index, c.mod_index + c.batch * c.seq);
    text.assign(c.text, c.text + c.batch * c.n_text * d);
    cos.assign(c.cos, c.cos + c.seq * f.attention_head_dim / 2);
    sin.assign(c.sin, c.sin + c.seq * f.attention_head_dim / 2);
    return ok_status();
  };
  tap.block_input = [&](int64_t index, const float* x) {
    EXPECT_EQ(index, static_cast<int64_t>(inputs.size()));
    inputs.emplace_back(x, x + cond.batch * cond.seq * d);
    return ok_status();
  };
  ThreadPool pool(2);
  std::vector<float> out(static_cast<size_t>(batch) * f.out_channels * 3 * 4 * 4);
  model->set_tap(&tap);
  ASSERT_TRUE(model->forward(in.view(batch), out.data(), pool).ok());
  model->set_tap(nullptr);
  ASSERT_EQ(static_cast<int64_t>(inputs.size()), f.num_layers + 1);
  ASSERT_EQ(cond.batch, batch);
  EXPECT_EQ(cond.n_distinct, in.per_token ? 2 : 1) << "distinct timesteps";

  auto comp = models::Component::open(dir.string());
  ASSERT_TRUE(comp.ok());
  const int64_t S = cond.seq, L = cond.n_text;
  for (int64_t k = 0; k < f.num_layers; ++k) {
    auto block = quant::load_wan_block(*comp, f, k);
    ASSERT_TRUE(block.ok()) << block.status().to_string();
    quant::PerLinear<const float*> w(quant::kWanLinears);
    for (int i = 0; i < quant::kWanLinears; ++i) w[i] = block->w[i].data();
    for (int64_t b = 0; b < batch; ++b) {
      // The item's modulation rows: one, or one per token (TI2V's per-token timesteps).
      const int64_t* idx = mod_index.data() + b * S;
      const bool per_token = in.per_token;
      std::vector<float> rows;
      for (int64_t t = 0; t < (per_token ? S : 1); ++t) {
        rows.insert(rows.end(), tproj.begin() + idx[t] * 6 * d,
                    tproj.begin() + (idx[t] + 1) * 6 * d);
      }
      const quant::WanConditioning<float> c{
          S, L, per_token ? S : 1, rows.data(), text.data() + b * L * d, cos.data(), sin.data()};
      quant::WanBlockActivations<float> act;
      std::vector<float> y(S * d);
      quant::wan_block_forward<float>(*block, w, c, inputs[k].data() + b * S * d, &act, y.data(),
                                      pool);
      const float* want = inputs[k + 1].data() + b * S * d;
      double max_diff = 0, max_abs = 0;
      for (int64_t e = 0; e < S * d; ++e) {
        max_diff = std::max(max_diff, static_cast<double>(std::abs(y[e] - want[e])));
        max_abs = std::max(max_abs, static_cast<double>(std::abs(want[e])));
      }
      // f32 on both sides; what differs is summation order (ops' kernels vs plain loops).
      EXPECT_LT(max_diff, 1e-5 * (1 + max_abs)) << fixture << " block " << k << " item " << b;
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WanBlockForward, ::testing::Values("t2v_a14b", "ti2v_5b"));

// The fixture's reference inputs through `dir`'s transformer, bf16 activations.
std::vector<float> forward(const fs::path& dir) {
  auto model = diffusion::WanTransformer::load(dir.string());
  QS_CHECK_MSG(model.ok(), model.status().to_string().c_str());
  static const testing::WanReference ref("tiny_autoround_w4g32");
  const testing::WanReferenceInputs in(ref);
  ThreadPool pool(2);
  std::vector<float> out(16 * 3 * 4 * 4);
  const ops::ActivationPrecision saved = ops::activation_precision();
  ops::set_activation_precision(ops::ActivationPrecision::kBf16);
  const Status s = model->forward(in.view(), out.data(), pool);
  ops::set_activation_precision(saved);
  QS_CHECK_MSG(s.ok(), s.to_string().c_str());
  return out;
}

double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

class WanAutoRoundCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("qs_wan_autoround_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    source_ = dir_ / "source";
    fs::copy(testing::wan_pipeline("t2v_a14b"), source_, fs::copy_options::recursive);
    for (const std::string& expert : kExperts) {
      fs::remove_all(source_ / expert);
      fs::copy(kTool / "source" / expert, source_ / expert, fs::copy_options::recursive);
    }
    const std::string common = " --nsamples 4 --group_size 32 --threads 2";
    auto r = run_cli("quantize --model " + source_.string() + " --output_dir " +
                     (dir_ / "ar").string() + " --iters 20" + common);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    summary_ = r.output;
    r = run_cli("quantize --model " + source_.string() + " --output_dir " +
                (dir_ / "rtn").string() + " --iters 0 --disable_opt_rtn" + common);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static fs::path dir_, source_;
  static std::string summary_;
};
fs::path WanAutoRoundCli::dir_;
fs::path WanAutoRoundCli::source_;
std::string WanAutoRoundCli::summary_;

TEST_F(WanAutoRoundCli, WritesTheToolsConfigWithItsIters) {
  EXPECT_NE(summary_.find("AutoRound (--iters 20), both transformers of the pipeline | 40 | 12 |"),
            std::string::npos)
      << summary_;
  // 4 prompts x 8 steps x 2 CFG branches, split at the 0.875 boundary.
  EXPECT_NE(summary_.find("calibration: 4 prompts (built-in) x 8 steps"), std::string::npos)
      << summary_;
  for (const std::string& expert : kExperts) {
    auto ours = read_json((dir_ / "ar" / expert / "config.json").string());
    auto tool = read_json((kTool / expert / "config.json").string());
    ASSERT_TRUE(ours.ok() && tool.ok());
    nlohmann::json qc = (*ours)["quantization_config"];
    nlohmann::json want = (*tool)["quantization_config"];
    EXPECT_EQ(qc["iters"], 20);
    EXPECT_FALSE(qc.contains("model_free"));
    qc.erase("iters");
    want.erase("iters");
    EXPECT_EQ(qc, want) << expert;
    auto c = models::Component::open((dir_ / "ar" / expert).string());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_TRUE(c->quantization().quantized());
    auto w = c->linear("blocks.1.ffn.net.2", 32, 64, nullptr);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_NE(w->quant, nullptr);
  }
}

TEST_F(WanAutoRoundCli, EveryBlockReconstructsBetterThanRtn) {
  // | transformer.blocks.0 | <RTN loss> | <tuned loss> | ...: both over the block's whole
  // calibration set on the quantized chain's inputs.
  const std::regex row(R"(\| (transformer(_2)?\.blocks\.\d) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \|)");
  int rows = 0;
  for (auto it = std::sregex_iterator(summary_.begin(), summary_.end(), row);
       it != std::sregex_iterator(); ++it) {
    const double rtn = std::stod((*it)[3]), tuned = std::stod((*it)[4]);
    EXPECT_LT(tuned, 0.8 * rtn) << (*it)[1];
    EXPECT_GT(tuned, 0.0) << (*it)[1];
    ++rows;
  }
  EXPECT_EQ(rows, 4) << summary_;
}

TEST_F(WanAutoRoundCli, ForwardIsCloserToTheSourceThanRtn) {
  for (const std::string& expert : kExperts) {
    const std::vector<float> source = forward(source_ / expert);
    const std::vector<float> ar_out = forward(dir_ / "ar" / expert);
    const std::vector<float> rtn_out = forward(dir_ / "rtn" / expert);
    const std::vector<float> tool_out = forward(kTool / expert);
    const double ar = rms_diff(ar_out, source), rtn = rms_diff(rtn_out, source);
    std::printf(
        "%s vs the bf16 source, RMS (max |diff|): RTN %.4g (%.4g), ours 20 iters %.4g "
        "(%.4g), auto-round 50 iters %.4g (%.4g)\n",
        expert.c_str(), rtn, max_abs(rtn_out, source), ar, max_abs(ar_out, source),
        rms_diff(tool_out, source), max_abs(tool_out, source));
    EXPECT_LE(ar, rtn) << expert;
  }
}

}  // namespace
}  // namespace qs
