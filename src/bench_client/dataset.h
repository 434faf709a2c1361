// bench_client: the request sets of vLLM's serving and throughput benchmarks
// (vllm/benchmarks/datasets): ShareGPT conversations filtered as vLLM filters them, and synthetic
// "random" prompts built from token ids and decoded with the model's tokenizer. Same seed, same
// requests; the RNG is ours (not numpy's), so the exact prompts differ from vLLM's while every rule
// matches.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace qs::bench {

struct SampleRequest {
  std::string prompt;
  int64_t prompt_len = 0;           // tokens, as the client's tokenizer counts them
  int64_t expected_output_len = 0;  // max_tokens sent with the request
};

// Token count of a text, with the tokenizer's special tokens (BOS) as HF's `tokenizer(text)`.
using CountTokens = std::function<int64_t(const std::string&)>;

// vLLM's is_valid_sequence (datasets/utils.py): prompt and output at least 4 tokens (the
// output check skipped when the output length is fixed by a flag), prompt at most 1024,
// prompt + output at most 2048.
bool is_valid_sequence(int64_t prompt_len, int64_t output_len, bool skip_min_output_len_check);

// The first two turns (prompt, completion) of every ShareGPT entry that has at least two, in
// file order. An unreadable file or one that is not a JSON array of objects is an error.
Result<std::vector<std::pair<std::string, std::string>>> read_sharegpt(const std::string& path);

struct ShareGptOptions {
  int64_t num_prompts = 1000;
  std::optional<int64_t> output_len;  // --sharegpt-output-len: overrides the completion's length
  uint64_t seed = 0;
  bool oversample = true;  // repeat random survivors when fewer than num_prompts pass the filter
};

// vLLM's ShareGPTDataset.sample: shuffle with the seed, keep valid (prompt, completion) pairs in
// that order until num_prompts are taken, then oversample if short.
std::vector<SampleRequest> sample_sharegpt(std::vector<std::pair<std::string, std::string>> convs,
                                           const CountTokens& count_tokens,
                                           const ShareGptOptions& options);

struct RandomOptions {
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0.0;  // lengths uniform in [floor(L(1-r)), ceil(L(1+r))]
  int64_t prefix_len = 0;    // a random prefix shared by every prompt
  uint64_t seed = 0;
};

// vLLM's RandomDataset.sample: input length minus the tokenizer's added special tokens; ids
// allowed[(offset + i + k) % |allowed|] with special ids excluded; decoded, re-encoded and
// padded or truncated (at most 10 rounds) so the prompt tokenizes to its target length.
Result<std::vector<SampleRequest>> sample_random(const tok::Tokenizer& tokenizer,
                                                 const RandomOptions& options);

}  // namespace qs::bench
