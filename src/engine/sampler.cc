// engine: the Sampler (see sampler.h). Order and formulas follow vLLM: penalties on the raw
// logits, temperature, then top-k, top-p, min-p on the tempered distribution (vLLM V0
// order; min-p is scale-invariant, so it removes the same tokens wherever it runs, only the
// top-p mass it sees differs), then one draw. Every step is a few O(vocab) passes: top-k and
// top-p find their cut with a histogram over weight buckets and sort only the tokens of the
// bucket the cut falls in, never the whole vocabulary.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/check.h"
#include "ops/elementwise.h"

namespace qs {
namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Lowest id among the largest logits (torch.argmax's tie rule); NaN never wins.
int32_t argmax(const float* logits, int64_t vocab) {
  int32_t best = 0;
  float best_v = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    if (logits[i] > best_v) {
      best_v = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

}  // namespace

bool SamplingParams::is_greedy() const {
  return temperature < kGreedyTemperature;
}

Status SamplingParams::validate(int64_t vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 2.0f)
    return invalid_argument("temperature must be in [0, 2], got " + fmt(temperature) + ".");
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return invalid_argument("top_p must be in (0, 1], got " + fmt(top_p) + ".");
  if (top_k < -1)
    return invalid_argument("top_k must be 0 or -1 (disable), or at least 1, got " +
                            std::to_string(top_k) + ".");
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return invalid_argument("min_p must be in [0, 1], got " + fmt(min_p) + ".");
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f)
    return invalid_argument("repetition_penalty must be a finite number greater than zero, got " +
                            fmt(repetition_penalty) + ".");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return invalid_argument("presence_penalty must be in [-2, 2], got " + fmt(presence_penalty) +
                            ".");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return invalid_argument("frequency_penalty must be in [-2, 2], got " + fmt(frequency_penalty) +
                            ".");
  if (max_tokens < 1)
    return invalid_argument("max_tokens must be at least 1, got " + std::to_string(max_tokens) +
                            ".");
  if (min_tokens < 0 || min_tokens > max_tokens)
    return invalid_argument("min_tokens must be in [0, max_tokens=" + std::to_string(max_tokens) +
                            "], got " + std::to_string(min_tokens) + ".");
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs))
    return invalid_argument("logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " +
                            std::to_string(*logprobs) + ".");
  for (const auto& s : stop) {
    if (s.empty()) return invalid_argument("stop cannot contain an empty string.");
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size)
      return invalid_argument("stop_token_ids contains " + std::to_string(id) +
                              ", outside the vocabulary [0, " + std::to_string(vocab_size) + ").");
  }
  return ok_status();
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  if (params_.seed) {
    rng_.seed(*params_.seed);
  } else {
    std::random_device device;
    rng_.seed((static_cast<uint64_t>(device()) << 32) ^ device());
  }
}

double Sampler::uniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::apply_penalties(float* logits, int64_t vocab, std::span<const int32_t> prompt_ids,
                              std::span<const int32_t> output_ids) {
  const float rep = params_.repetition_penalty;
  const float freq = params_.frequency_penalty;
  const float pres = params_.presence_penalty;
  if (rep == 1.0f && freq == 0.0f && pres == 0.0f) return;
  if (static_cast<int64_t>(seen_.size()) < vocab) {
    seen_.assign(vocab, 0);
    counts_.assign(vocab, 0);
  }
  for (auto ids : {prompt_ids, output_ids}) {
    for (int32_t id : ids) QS_CHECK_MSG(id >= 0 && id < vocab, "token id outside the vocabulary");
  }
  if (rep != 1.0f) {
    // HF/vLLM: once per distinct token of prompt + output, positive logits shrink, negative
    // ones grow, so the token always becomes less likely for rep > 1.
    for (auto ids : {prompt_ids, output_ids}) {
      for (int32_t id : ids) {
        if (seen_[id]) continue;
        seen_[id] = 1;
        float& l = logits[id];
        l = l > 0.0f ? l / rep : l * rep;
      }
    }
    for (auto ids : {prompt_ids, output_ids}) {
      for (int32_t id : ids) seen_[id] = 0;
    }
  }
  if (freq != 0.0f || pres != 0.0f) {
    // OpenAI: logit -= count * frequency_penalty + (count > 0) * presence_penalty, over the
    // generated tokens only.
    for (int32_t id : output_ids) ++counts_[id];
    for (int32_t id : output_ids) {
      if (counts_[id] == 0) continue;  // already applied for an earlier occurrence
      logits[id] -= static_cast<float>(counts_[id]) * freq + pres;
      counts_[id] = 0;
    }
  }
}

int32_t Sampler::sample(float* logits, int64_t vocab, std::span<const int32_t> prompt_ids,
                        std::span<const int32_t> output_ids) {
  QS_CHECK(vocab > 0 && vocab <= std::numeric_limits<int32_t>::max());
  apply_penalties(logits, vocab, prompt_ids, output_ids);
  if (params_.is_greedy()) return argmax(logits, vocab);

  const float inv_t = 1.0f / params_.temperature;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float max_logit = neg_inf;
  for (int64_t i = 0; i < vocab; ++i) {
    // NaN (a broken model) becomes -inf so that it is never drawn and orderings stay strict.
    const float l = std::isnan(logits[i]) ? neg_inf : logits[i] * inv_t;
    logits[i] = l;
    max_logit = std::max(max_logit, l);
  }
  // Nothing finite to normalise against: all -inf, or some +inf that would take all mass.
  if (!std::isfinite(max_logit)) return argmax(logits, vocab);

  if (static_cast<int64_t>(weights_.size()) < vocab) weights_.resize(vocab);
  // Unnormalised probabilities in [0, 1]; the top token has weight 1. The vector exp of ops
  // (a few ulp from std::exp), because at a server's default temperature every row of every
  // step exponentiates the whole vocabulary: std::exp was 4 % of a 16-stream decode on a
  // 152k vocabulary. It gives a -inf logit 0 on AVX-512 but up to 2^-126 on AVX2, so weights
  // below FLT_MIN (a probability under 1e-38 of the top token's) are flushed to 0: a banned
  // token is never drawn.
  ops::exp_sub(logits, vocab, max_logit, weights_.data());
  for (int64_t i = 0; i < vocab; ++i) {
    if (weights_[i] < std::numeric_limits<float>::min()) weights_[i] = 0.0f;
  }
  const bool use_top_k = params_.top_k > 0 && params_.top_k < vocab;
  const bool use_top_p = params_.top_p < 1.0f;
  if (!use_top_k && !use_top_p) return sample_dense(vocab);
  return sample_filtered(vocab);
}

int32_t Sampler::sample_dense(int64_t vocab) {
  // min-p: p < min_p * p_max  <=>  weight < min_p.
  const float min_w = params_.min_p;
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (weights_[i] < min_w) weights_[i] = 0.0f;
    total += weights_[i];
  }
  const double u = uniform() * total;
  double acc = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    acc += weights_[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  // Rounding left u at the very top: the last token with any weight is the one it fell in.
  int64_t last = vocab - 1;
  while (last > 0 && weights_[last] == 0.0f) --last;
  return static_cast<int32_t>(last);
}

bool Sampler::better(int32_t a, int32_t b) const {
  return weights_[a] > weights_[b] || (weights_[a] == weights_[b] && a < b);
}

void Sampler::select_top_k(int64_t vocab, int64_t k) {
  bucket_counts_.assign(kNumBuckets, 0);
  for (int64_t i = 0; i < vocab; ++i) ++bucket_counts_[weight_bucket(weights_[i])];
  // The highest bucket b such that buckets >= b hold at least k tokens.
  int64_t n_above = 0;
  uint32_t b = kNumBuckets - 1;
  while (b > 0 && n_above + bucket_counts_[b] < k) n_above += bucket_counts_[b--];
  kept_.clear();
  for (int64_t i = 0; i < vocab; ++i) {
    if (weight_bucket(weights_[i]) >= b) kept_.push_back(static_cast<int32_t>(i));
  }
  auto cmp = [this](int32_t x, int32_t y) { return better(x, y); };
  if (static_cast<int64_t>(kept_.size()) > k) {
    std::nth_element(kept_.begin(), kept_.begin() + (k - 1), kept_.end(), cmp);
    kept_.resize(k);
  }
  std::sort(kept_.begin(), kept_.end(), cmp);
}

void Sampler::select_top_p(int64_t vocab, double top_p) {
  bucket_mass_.assign(kNumBuckets, 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    bucket_mass_[weight_bucket(weights_[i])] += weights_[i];
    total += weights_[i];
  }
  const double target = top_p * total;
  // Whole buckets above b are in the set; the set ends inside bucket b.
  double acc = 0.0;
  uint32_t b = kNumBuckets - 1;
  while (b > 0 && acc + bucket_mass_[b] < target) acc += bucket_mass_[b--];
  kept_.clear();
  boundary_.clear();
  for (int64_t i = 0; i < vocab; ++i) {
    const uint32_t bi = weight_bucket(weights_[i]);
    if (bi > b) {
      kept_.push_back(static_cast<int32_t>(i));
    } else if (bi == b) {
      boundary_.push_back(static_cast<int32_t>(i));
    }
  }
  std::sort(boundary_.begin(), boundary_.end(),
            [this](int32_t x, int32_t y) { return better(x, y); });
  for (int32_t id : boundary_) {
    kept_.push_back(id);
    acc += weights_[id];
    if (acc >= target) break;
  }
}

int32_t Sampler::sample_filtered(int64_t vocab) {
  if (params_.top_k > 0 && params_.top_k < vocab) {
    select_top_k(vocab, params_.top_k);
    if (params_.top_p < 1.0f) {
      // Top-p on the top-k distribution: the smallest best-first prefix reaching top_p of it.
      double total = 0.0;
      for (int32_t id : kept_) total += weights_[id];
      const double target = static_cast<double>(params_.top_p) * total;
      double acc = 0.0;
      size_t n = 0;
      while (n < kept_.size()) {
        acc += weights_[kept_[n++]];
        if (acc >= target) break;
      }
      kept_.resize(n);
    }
  } else {
    select_top_p(vocab, params_.top_p);
  }
  // min-p; the top token (weight 1 >= min_p) is in kept_ and survives.
  std::erase_if(kept_, [this](int32_t id) { return weights_[id] < params_.min_p; });
  QS_CHECK(!kept_.empty());
  double total = 0.0;
  for (int32_t id : kept_) total += weights_[id];
  const double u = uniform() * total;
  double acc = 0.0;
  for (int32_t id : kept_) {
    acc += weights_[id];
    if (u < acc) return id;
  }
  size_t last = kept_.size() - 1;
  while (last > 0 && weights_[kept_[last]] == 0.0f) --last;
  return kept_[last];
}

}  // namespace qs
