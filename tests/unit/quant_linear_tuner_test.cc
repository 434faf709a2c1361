// quant: AutoRound for one linear outside the blocks (tune_linear, the --quant_lm_head path) on
// a random layer whose quantized-chain inputs are perturbed copies of the full-precision ones:
// iteration 0 is RTN's loss, the best snapshot is what it exports and beats RTN over the whole
// set, the loss mask and the per-sample chunking count exactly the positions they should, the
// same seed gives the same codes, and bad arguments are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "formats/rtn.h"
#include "quant/linear_tuner.h"

namespace qs::quant {
namespace {

formats::QuantScheme int_scheme(int bits, int64_t group_size, bool sym) {
  formats::QuantScheme s;
  s.layout = formats::Layout::kGptq;
  s.bits = bits;
  s.group_size = group_size;
  s.sym = sym;
  return s;
}

struct Problem {
  int64_t n = 48, k = 64, samples = 4, seqlen = 12;
  std::vector<float> w, x_fp, x_q;
  std::vector<uint8_t> loss_mask;
  explicit Problem(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    w.resize(n * k);
    for (float& v : w) v = normal(rng) / 8.0f;
    x_fp.resize(samples * seqlen * k);
    for (float& v : x_fp) v = normal(rng);
    x_q = x_fp;
    for (float& v : x_q) v += 0.05f * normal(rng);
    loss_mask.assign(samples * seqlen, 1);
    for (int64_t s = 0; s < samples; ++s) loss_mask[s * seqlen + seqlen - 1] = 0;
  }
  LinearCalibration calib() const {
    return {x_q.data(), x_fp.data(), loss_mask.data(), samples, seqlen};
  }
};

// The loss by hand, in double: mean over the masked positions and outputs of
// (x_q Wq^T - x_fp W^T)^2.
double reference_loss(const Problem& p, const formats::QuantizedWeight& q) {
  std::vector<float> wq(p.n * p.k);
  formats::dequantize(q, wq.data());
  double sum = 0;
  int64_t count = 0;
  for (int64_t t = 0; t < p.samples * p.seqlen; ++t) {
    if (!p.loss_mask[t]) continue;
    for (int64_t o = 0; o < p.n; ++o) {
      double y = 0, target = 0;
      for (int64_t j = 0; j < p.k; ++j) {
        y += static_cast<double>(p.x_q[t * p.k + j]) * wq[o * p.k + j];
        target += static_cast<double>(p.x_fp[t * p.k + j]) * p.w[o * p.k + j];
      }
      sum += (y - target) * (y - target);
      ++count;
    }
  }
  return sum / static_cast<double>(count);
}

TuneOptions whole_set_options(int iters) {
  TuneOptions t;
  t.iters = iters;
  t.batch_size = 4;  // the whole set every iteration: mini-batch loss = whole-set loss
  return t;
}

TEST(LinearTuner, BestSnapshotBeatsRtnAndIsExported) {
  const Problem p(11);
  ThreadPool pool(2);
  const formats::QuantScheme scheme = int_scheme(2, 32, true);
  std::vector<double> losses;
  auto r = tune_linear(p.w.data(), p.n, p.k, scheme, p.calib(), whole_set_options(30), pool,
                       [&](int, double loss) { losses.push_back(loss); });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(losses.size(), 30u);
  const formats::QuantizedWeight rtn = formats::rtn_quantize(p.w.data(), p.n, p.k, 2, 32, true);
  EXPECT_NEAR(r->initial_loss, reference_loss(p, rtn), 1e-5 * r->initial_loss);
  EXPECT_NEAR(r->best_loss, reference_loss(p, r->weight), 1e-5 * r->best_loss);
  EXPECT_LT(r->best_loss, 0.9 * r->initial_loss);
  EXPECT_GT(r->best_iter, 0);
  EXPECT_EQ(r->best_loss, losses[r->best_iter]);
  auto whole = linear_loss(p.w.data(), p.n, p.k, &r->weight, p.calib(), pool);
  ASSERT_TRUE(whole.ok());
  EXPECT_NEAR(*whole, r->best_loss, 1e-6 * r->best_loss);
  auto exact = linear_loss(p.w.data(), p.n, p.k, nullptr, p.calib(), pool);
  ASSERT_TRUE(exact.ok());
  EXPECT_GT(*exact, 0);  // x_q != x_fp: even the exact weight has a loss
  EXPECT_LT(*exact, r->best_loss);
}

TEST(LinearTuner, SameSeedSameCodesAndMiniBatches) {
  const Problem p(12);
  ThreadPool pool(1);
  const formats::QuantScheme scheme = int_scheme(4, 32, false);
  TuneOptions t;
  t.iters = 12;
  t.batch_size = 1;
  t.gradient_accumulate_steps = 2;  // 2 of the 4 samples per step
  auto a = tune_linear(p.w.data(), p.n, p.k, scheme, p.calib(), t, pool);
  auto b = tune_linear(p.w.data(), p.n, p.k, scheme, p.calib(), t, pool);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->weight.codes, b->weight.codes);
  EXPECT_EQ(a->weight.scales, b->weight.scales);
  EXPECT_EQ(a->best_loss, b->best_loss);
  t.seed = 43;
  auto c = tune_linear(p.w.data(), p.n, p.k, scheme, p.calib(), t, pool);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->initial_loss, c->initial_loss);  // another pair of samples at step 0
}

TEST(LinearTuner, BadArgumentsAreErrors) {
  const Problem p(13);
  ThreadPool pool(1);
  const formats::QuantScheme int4 = int_scheme(4, 32, true);
  EXPECT_FALSE(tune_linear(p.w.data(), p.n, p.k, int4, p.calib(), whole_set_options(0), pool).ok());
  LinearCalibration empty = p.calib();
  empty.n_samples = 0;
  EXPECT_FALSE(tune_linear(p.w.data(), p.n, p.k, int4, empty, whole_set_options(4), pool).ok());
  EXPECT_FALSE(tune_linear(p.w.data(), p.n, p.k, formats::QuantScheme{}, p.calib(),
                           whole_set_options(4), pool)
                   .ok());
  std::vector<float> bad = p.x_q;
  bad[5] = NAN;
  LinearCalibration nan_calib = p.calib();
  nan_calib.inputs = bad.data();
  auto r = tune_linear(p.w.data(), p.n, p.k, int4, nan_calib, whole_set_options(4), pool);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not finite"), std::string::npos);
}

}  // namespace
}  // namespace qs::quant
