// quant: the Wan block tuner (wan_tuner.h) on a random block: SignRound lowers the whole-set
// reconstruction loss below RTN's, iters 0 is exactly RTN, a linear left 16-bit is not touched,
// bad calibration is refused; and the calibration prompt list (built-in or one per line).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#include "formats/rtn.h"
#include "quant/wan_tuner.h"

namespace qs::quant {
namespace {

std::vector<float> random_vec(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

struct Fixture {
  static constexpr int64_t kDim = 32, kSeq = 8, kText = 4, kSamples = 6;
  WanBlockTensors<float> block;
  std::vector<float> inputs, targets;
  std::vector<std::vector<float>> tproj, text;
  std::vector<float> cos, sin;
  WanBlockCalibration calib;

  Fixture() {
    std::mt19937 rng(3);
    block.dim = kDim;
    block.n_heads = 2;
    block.head_dim = 16;
    block.ffn_dim = 64;
    block.scale_shift_table = random_vec(rng, 6 * kDim, -0.3f, 0.3f);
    for (auto* n : {&block.norm_q, &block.norm_k, &block.norm_q2, &block.norm_k2, &block.norm2_w})
      *n = random_vec(rng, kDim, 0.8f, 1.2f);
    block.norm2_b = random_vec(rng, kDim, -0.1f, 0.1f);
    for (int i = 0; i < kWanLinears; ++i) {
      const float s = 1.0f / std::sqrt(static_cast<float>(block.in_features(i)));
      block.w.push_back(random_vec(rng, block.out_features(i) * block.in_features(i), -s, s));
      block.bias.push_back(random_vec(rng, block.out_features(i), -0.05f, 0.05f));
    }
    inputs = random_vec(rng, kSamples * kSeq * kDim, -1, 1);
    for (float a : random_vec(rng, kSeq * 8, -2, 2)) {
      cos.push_back(std::cos(a));
      sin.push_back(std::sin(a));
    }
    for (int64_t s = 0; s < kSamples; ++s) {
      tproj.push_back(random_vec(rng, 6 * kDim, -0.3f, 0.3f));
      text.push_back(random_vec(rng, kText * kDim, -1, 1));
    }
    calib.n_samples = kSamples;
    calib.seq = kSeq;
    calib.inputs = inputs.data();
    for (int64_t s = 0; s < kSamples; ++s) {
      calib.conditioning.push_back(
          {kSeq, kText, 1, tproj[s].data(), text[s].data(), cos.data(), sin.data()});
    }
    targets.resize(inputs.size());
    ThreadPool pool(2);
    const PerLinear<const formats::QuantizedWeight*> fp(kWanLinears, nullptr);
    EXPECT_TRUE(wan_block_output(block, fp, calib, targets.data(), pool).ok());
    calib.targets = targets.data();
  }
};

PerLinear<formats::QuantScheme> w4g32() {
  formats::QuantScheme s;
  s.layout = formats::Layout::kGptq;
  s.bits = 4;
  s.group_size = 32;
  s.sym = true;
  return PerLinear<formats::QuantScheme>(kWanLinears, s);
}

PerLinear<const formats::QuantizedWeight*> ptrs(const TuneResult& r) {
  PerLinear<const formats::QuantizedWeight*> p(kWanLinears, nullptr);
  for (int i = 0; i < kWanLinears; ++i) p[i] = r.weights[i] ? &*r.weights[i] : nullptr;
  return p;
}

TEST(WanTuner, SignRoundBeatsRtnOnTheWholeSet) {
  Fixture f;
  ThreadPool pool(2);
  TuneOptions opt;
  opt.iters = 0;
  auto rtn = tune_wan_block(f.block, w4g32(), f.calib, opt, pool);
  ASSERT_TRUE(rtn.ok()) << rtn.status().to_string();
  // iters 0: every linear is plain RTN.
  for (int i = 0; i < kWanLinears; ++i) {
    ASSERT_TRUE(rtn->weights[i].has_value());
    const formats::QuantizedWeight want = formats::rtn_quantize(
        f.block.w[i].data(), f.block.out_features(i), f.block.in_features(i), 4, 32, true);
    std::vector<float> a(f.block.w[i].size()), b(a.size());
    formats::dequantize(*rtn->weights[i], a.data());
    formats::dequantize(want, b.data());
    EXPECT_EQ(a, b) << wan_linear_name(i);
  }
  opt.iters = 40;
  opt.batch_size = 4;
  auto tuned = tune_wan_block(f.block, w4g32(), f.calib, opt, pool);
  ASSERT_TRUE(tuned.ok()) << tuned.status().to_string();
  EXPECT_GT(tuned->best_iter, 0);
  EXPECT_LT(tuned->best_loss, tuned->initial_loss);
  const double rtn_loss = wan_block_loss(f.block, ptrs(*rtn), f.calib, pool).value();
  const double tuned_loss = wan_block_loss(f.block, ptrs(*tuned), f.calib, pool).value();
  EXPECT_GT(rtn_loss, 0.0);
  EXPECT_LT(tuned_loss, 0.8 * rtn_loss) << "RTN " << rtn_loss << ", tuned " << tuned_loss;
}

TEST(WanTuner, LeavesA16BitLinearAlone) {
  Fixture f;
  ThreadPool pool(1);
  PerLinear<formats::QuantScheme> schemes = w4g32();
  schemes[kWanK2] = formats::QuantScheme();  // kDense
  TuneOptions opt;
  opt.iters = 3;
  auto r = tune_wan_block(f.block, schemes, f.calib, opt, pool);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->weights[kWanK2].has_value());
  EXPECT_TRUE(r->weights[kWanV2].has_value());
}

TEST(WanTuner, RefusesBadCalibration) {
  Fixture f;
  ThreadPool pool(1);
  TuneOptions opt;
  opt.iters = 2;
  WanBlockCalibration bad = f.calib;
  bad.conditioning.pop_back();
  EXPECT_FALSE(tune_wan_block(f.block, w4g32(), bad, opt, pool).ok());
  bad = f.calib;
  bad.conditioning[1].seq = 3;
  EXPECT_FALSE(tune_wan_block(f.block, w4g32(), bad, opt, pool).ok());
  PerLinear<formats::QuantScheme> s = w4g32();
  s[0].bits = 9;
  auto r = tune_wan_block(f.block, s, f.calib, opt, pool);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("attn1.to_q"), std::string::npos) << r.status().to_string();
}

TEST(WanCalibrationPrompts, BuiltInOrOnePerLine) {
  auto builtin = wan_calibration_prompts("", 4);
  ASSERT_TRUE(builtin.ok());
  EXPECT_EQ(builtin->size(), 4u);
  const std::string path = ::testing::TempDir() + "/wan_prompts.txt";
  std::ofstream(path) << "a red fox\r\n\n  \nrain on a window\n";
  auto file = wan_calibration_prompts(path, 8);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(*file, (std::vector<std::string>{"a red fox", "rain on a window"}));
  std::ofstream(path) << "\n\n";
  EXPECT_FALSE(wan_calibration_prompts(path, 8).ok());
  EXPECT_FALSE(wan_calibration_prompts("/nonexistent/prompts.txt", 8).ok());
  EXPECT_FALSE(wan_calibration_prompts("", 0).ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace qs::quant
