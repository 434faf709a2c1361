// engine: per-request sampling parameters (the vLLM / OpenAI set) and the Sampler that turns
// one step's logits into a token: penalties, temperature, top-k, top-p, min-p, then a draw
// from the request's own RNG. Same seed -> same tokens, whatever else shares the batch.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs {

// Defaults are vLLM's. Disabled values: top_k -1 or 0, top_p 1, min_p 0, penalties 1/0/0.
struct SamplingParams {
  float temperature = 1.0f;  // < kGreedyTemperature means greedy (argmax)
  int32_t top_k = -1;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;  // > 1 discourages tokens of prompt and output
  float presence_penalty = 0.0f;    // subtracted once from each token already generated
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the generated tokens
  std::optional<uint64_t> seed;     // absent: seeded from std::random_device
  int32_t max_tokens = 16;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  // EOS, stop_token_ids and stop strings cannot end the request before this many tokens
  // (vLLM: their logits are masked and the stop checks skipped until then).
  int32_t min_tokens = 0;
  // Absent: no logprobs. N in [0, kMaxLogprobs]: each generated token comes with its own
  // logprob and the N most likely tokens', from the log-softmax of the raw logits (vLLM's
  // default logprobs_mode raw_logprobs: before penalties, temperature and masking).
  std::optional<int32_t> logprobs;

  // vLLM's checks and messages (vllm/sampling_params.py), plus token ids against the vocab.
  Status validate(int64_t vocab_size) const;
  bool is_greedy() const;
};

// vLLM's --max-logprobs default.
inline constexpr int32_t kMaxLogprobs = 20;

// vLLM's _SAMPLING_EPS: temperatures below this sample greedily.
inline constexpr float kGreedyTemperature = 1e-5f;

// One per request; holds the request's RNG and scratch buffers sized to the vocabulary, so
// a step allocates nothing after the first. Not thread-safe; requests do not share one.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // logits: [vocab], modified in place (penalties, temperature). prompt_ids/output_ids are
  // the request's tokens so far; every id must be in [0, vocab). Greedy draws no random
  // number, so a greedy request never advances the RNG.
  int32_t sample(float* logits, int64_t vocab, std::span<const int32_t> prompt_ids,
                 std::span<const int32_t> output_ids);

 private:
  void apply_penalties(float* logits, int64_t vocab, std::span<const int32_t> prompt_ids,
                       std::span<const int32_t> output_ids);
  // A uniform double in [0, 1) from 53 random bits (portable, unlike
  // std::uniform_real_distribution whose algorithm is implementation-defined).
  double uniform();
  // Draw from weights_ over the whole vocabulary (only min-p applies).
  int32_t sample_dense(int64_t vocab);
  // Top-k and/or top-p, then min-p, then a draw from the kept tokens.
  int32_t sample_filtered(int64_t vocab);
  // kept_ = the k best tokens, best first.
  void select_top_k(int64_t vocab, int64_t k);
  // kept_ = the smallest set of best tokens whose mass reaches top_p (not in order).
  void select_top_p(int64_t vocab, double top_p);
  // Best first: larger weight, then lower id, so that results never depend on how the
  // standard library partitions.
  bool better(int32_t a, int32_t b) const;

  // Positive float bits are ordered like the values, so the top 16 bits of a weight (exponent
  // and 7 mantissa bits) name a bucket no wider than a factor 1 + 1/128; weights lie in
  // [0, 1] -> buckets [0, 0x3F80]. Tokens only need sorting inside the bucket a cut falls in.
  static constexpr uint32_t kBucketShift = 16;
  static constexpr uint32_t kNumBuckets = (0x3F800000u >> kBucketShift) + 1;
  static uint32_t weight_bucket(float w) { return std::bit_cast<uint32_t>(w) >> kBucketShift; }

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> weights_;          // [vocab] exp(logit / T - max), in [0, 1]
  std::vector<int32_t> kept_;           // ids that survive top-k / top-p / min-p
  std::vector<int32_t> boundary_;       // ids in the bucket where the top-p cut falls
  std::vector<int64_t> bucket_counts_;  // [kNumBuckets] tokens per weight bucket
  std::vector<double> bucket_mass_;     // [kNumBuckets] weight per bucket
  std::vector<int32_t> counts_;         // [vocab] occurrences in output, zero between calls
  std::vector<uint8_t> seen_;           // [vocab] in prompt or output, zero between calls
};

}  // namespace qs
