// tests: the Sampler's transforms and draws. Penalties are checked logit by logit; top-k,
// top-p and min-p by the exact set of tokens that can come out; the draw itself by a
// chi-square test of frequencies against softmax probabilities with a fixed seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/sampler.h"

namespace qs {
namespace {

std::vector<float> random_logits(int64_t vocab, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> l(vocab);
  for (auto& x : l) x = dist(rng);
  return l;
}

int32_t draw(Sampler& s, std::vector<float> logits) {  // by value: sample() edits in place
  return s.sample(logits.data(), static_cast<int64_t>(logits.size()), {}, {});
}

int32_t argmax_of(const std::vector<float>& l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

// Counts of `n` draws.
std::vector<int64_t> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) ++counts[draw(s, logits)];
  return counts;
}

std::vector<double> softmax(const std::vector<float>& l, double temperature) {
  const double m = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp((l[i] - m) / temperature);
  for (auto& x : p) x /= z;
  return p;
}

// Pearson's chi-square over the tokens with expected > 0; tokens with expected 0 must
// never appear.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = probs[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  EXPECT_EQ(draw(s, {1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(draw(s, {-5.0f, -1.0f, -2.0f}), 1);
  EXPECT_EQ(draw(s, {0.0f, 0.0f, 0.0f}), 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(draw(s, {nan, -1.0f, 4.0f, nan}), 2);
}

TEST(SamplerTest, TopK1AndTinyTopPEqualGreedy) {
  for (uint64_t trial = 0; trial < 20; ++trial) {
    const auto logits = random_logits(5000, trial);
    SamplingParams k1;
    k1.top_k = 1;
    k1.seed = trial;
    SamplingParams tiny_p;
    tiny_p.top_p = 1e-6f;
    tiny_p.temperature = 1.5f;
    tiny_p.seed = trial;
    Sampler sk(k1), sp(tiny_p);
    EXPECT_EQ(draw(sk, logits), argmax_of(logits));
    EXPECT_EQ(draw(sp, logits), argmax_of(logits));
  }
}

TEST(SamplerTest, SameSeedSameTokensIndependentOfOtherRequests) {
  const auto logits = random_logits(3000, 7, 1.0f);
  SamplingParams p;
  p.seed = 1234;
  p.top_p = 0.95f;
  Sampler alone(p);
  std::vector<int32_t> ref;
  for (int i = 0; i < 64; ++i) ref.push_back(draw(alone, logits));

  // The same request again, interleaved with another request's draws as in a batch.
  Sampler again(p);
  SamplingParams other_p;
  Sampler other(other_p);
  std::vector<int32_t> got;
  for (int i = 0; i < 64; ++i) {
    draw(other, logits);
    got.push_back(draw(again, logits));
  }
  EXPECT_EQ(got, ref);

  p.seed = 1235;
  Sampler different(p);
  std::vector<int32_t> diff;
  for (int i = 0; i < 64; ++i) diff.push_back(draw(different, logits));
  EXPECT_NE(diff, ref);
}

TEST(SamplerTest, FrequenciesMatchSoftmaxWithTemperature) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 42;
  Sampler s(p);
  const int n = 100000;
  const auto counts = histogram(s, logits, n);
  // 5 degrees of freedom: P(chi2 > 20.52) = 0.001.
  EXPECT_LT(chi_square(counts, softmax(logits, 0.8), n), 20.52);
}

TEST(SamplerTest, TopKTopPMinPRenormaliseOverTheKeptSet) {
  // Probabilities at T=1: .4 .25 .15 .1 .06 .04 -> top_k=5 drops the last; top_p=0.85 of
  // the rest (total .96, target .816) keeps .4+.25+.15+.1 = .9 -> 4 tokens.
  const std::vector<double> probs = {0.4, 0.25, 0.15, 0.1, 0.06, 0.04};
  std::vector<float> logits;
  for (double q : probs) logits.push_back(static_cast<float>(std::log(q)));
  SamplingParams p;
  p.top_k = 5;
  p.top_p = 0.85f;
  p.seed = 5;
  {
    Sampler s(p);
    const int n = 60000;
    std::vector<double> expected = {0.4 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0.1 / 0.9, 0, 0};
    // 3 degrees of freedom: P(chi2 > 16.27) = 0.001.
    EXPECT_LT(chi_square(histogram(s, logits, n), expected, n), 16.27);
  }
  // min_p 0.3: drop p < 0.12 -> {.4, .25, .15}.
  p.min_p = 0.3f;
  {
    Sampler s(p);
    const int n = 60000;
    std::vector<double> expected = {0.4 / 0.8, 0.25 / 0.8, 0.15 / 0.8, 0, 0, 0};
    EXPECT_LT(chi_square(histogram(s, logits, n), expected, n), 13.82);  // 2 dof, 0.001
  }
  // min_p alone (dense path): 0.2 drops p < 0.08.
  SamplingParams only_min_p;
  only_min_p.min_p = 0.2f;
  only_min_p.seed = 6;
  {
    Sampler s(only_min_p);
    const int n = 60000;
    std::vector<double> expected = {0.4 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0.1 / 0.9, 0, 0};
    EXPECT_LT(chi_square(histogram(s, logits, n), expected, n), 16.27);
  }
}

TEST(SamplerTest, TopPKeepsTheSmallestPrefixOverALargeVocab) {
  // Large and flat, so that the top-p set spans many weight buckets.
  const int64_t vocab = 50000;
  const auto logits = random_logits(vocab, 99, 1.0f);
  const auto probs = softmax(logits, 1.0);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  const double top_p = 0.3;
  std::set<int32_t> kept;
  double acc = 0;
  for (int32_t id : order) {
    kept.insert(id);
    acc += probs[id];
    if (acc >= top_p) break;
  }
  ASSERT_GT(kept.size(), 1000u);
  SamplingParams p;
  p.top_p = static_cast<float>(top_p);
  p.seed = 3;
  Sampler s(p);
  std::set<int32_t> seen;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    const int32_t t = draw(s, logits);
    ASSERT_TRUE(kept.count(t)) << "token " << t << " is outside the top-p set";
    seen.insert(t);
  }
  std::printf("top-p set %zu tokens, %zu seen in %d draws\n", kept.size(), seen.size(), n);
  EXPECT_GT(seen.size(), kept.size() / 2);
}

TEST(SamplerTest, TopKKeepsExactlyKTokens) {
  const auto logits = random_logits(1000, 11, 0.5f);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const std::set<int32_t> top(order.begin(), order.begin() + 10);
  SamplingParams p;
  p.top_k = 10;
  p.seed = 8;
  Sampler s(p);
  std::set<int32_t> seen;
  for (int i = 0; i < 5000; ++i) seen.insert(draw(s, logits));
  EXPECT_EQ(seen, top);
}

TEST(SamplerTest, PenaltiesChangeExactlyTheRightLogits) {
  const std::vector<float> base = {1.0f, 2.0f, -1.0f, 4.0f, -3.0f, 0.5f, 6.0f, 0.0f};
  const std::vector<int32_t> prompt = {1, 2, 1};
  const std::vector<int32_t> output = {2, 3, 3, 7};
  SamplingParams p;
  p.temperature = 0.0f;  // greedy: sample() leaves the penalised logits in place
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s(p);
  auto logits = base;
  s.sample(logits.data(), static_cast<int64_t>(logits.size()), prompt, output);
  // Repetition on {1, 2, 3, 7} (prompt + output, once each): positive / 2, others * 2.
  // Frequency and presence on output counts {2: 1, 3: 2, 7: 1}.
  const std::vector<float> expected = {
      1.0f,                      // untouched
      2.0f / 2,                  // prompt only: repetition
      -1.0f * 2 - 0.5f - 0.25f,  // prompt and output once
      4.0f / 2 - 1.0f - 0.25f,   // output twice
      -3.0f,                     // untouched
      0.5f,                      // untouched
      6.0f,                      // untouched
      0.0f * 2 - 0.5f - 0.25f,   // zero logit is multiplied (stays 0) then penalised
  };
  for (size_t i = 0; i < base.size(); ++i) EXPECT_FLOAT_EQ(logits[i], expected[i]) << i;

  // A second step sees clean scratch state: the same call gives the same logits.
  auto again = base;
  s.sample(again.data(), static_cast<int64_t>(again.size()), prompt, output);
  EXPECT_EQ(again, logits);
}

TEST(SamplerTest, RepetitionPenaltyChangesTheGreedyChoice) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 1.5f;
  Sampler s(p);
  std::vector<float> logits = {3.0f, 2.5f, 1.0f};
  const std::vector<int32_t> output = {0};
  EXPECT_EQ(s.sample(logits.data(), 3, {}, output), 1);  // 3 / 1.5 = 2 < 2.5
}

TEST(SamplerTest, NonFiniteLogitsAreNeverDrawn) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SamplingParams p;
  p.seed = 1;
  Sampler s(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = draw(s, {nan, 0.0f, -inf, 0.0f, nan});
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  EXPECT_EQ(draw(s, {0.0f, inf, 1.0f}), 1);
  p.top_k = 2;
  p.top_p = 0.5f;
  Sampler sk(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = draw(sk, {nan, 1.0f, -inf, 1.0f, nan});
    EXPECT_EQ(t, 1);  // top-p 0.5 keeps one of two equal tokens: the lower id
  }
}

}  // namespace
}  // namespace qs
