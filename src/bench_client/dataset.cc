// bench_client: ShareGPT and random request sets (see dataset.h).
#include "bench_client/dataset.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench_client/rng.h"

namespace qs::bench {
namespace {

// vLLM's limits (datasets/utils.py is_valid_sequence defaults).
constexpr int64_t kMinLen = 4;
constexpr int64_t kMaxPromptLen = 1024;
constexpr int64_t kMaxTotalLen = 2048;
// gen_prompt_decode_to_target_len's max_retry.
constexpr int kMaxDecodeRetries = 10;

// Fisher-Yates with our Rng (std::shuffle's draws are implementation-defined).
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

}  // namespace

bool is_valid_sequence(int64_t prompt_len, int64_t output_len, bool skip_min_output_len_check) {
  const bool too_short =
      prompt_len < kMinLen || (!skip_min_output_len_check && output_len < kMinLen);
  const bool too_long = prompt_len > kMaxPromptLen || prompt_len + output_len > kMaxTotalLen;
  return !too_short && !too_long;
}

Result<std::vector<std::pair<std::string, std::string>>> read_sharegpt(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open ShareGPT file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json data = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (data.is_discarded()) return invalid_argument(path + ": not valid JSON");
  if (!data.is_array()) return invalid_argument(path + ": expected a JSON array of entries");
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < data.size(); ++i) {
    const nlohmann::json& entry = data[i];
    if (!entry.is_object()) {
      return invalid_argument(path + ": entry " + std::to_string(i) + " is not an object");
    }
    auto conv = entry.find("conversations");
    if (conv == entry.end() || !conv->is_array() || conv->size() < 2) continue;
    std::string turns[2];
    for (int t = 0; t < 2; ++t) {
      const nlohmann::json& turn = (*conv)[t];
      if (!turn.is_object() || !turn.contains("value") || !turn["value"].is_string()) {
        return invalid_argument(path + ": entry " + std::to_string(i) + " turn " +
                                std::to_string(t) + " has no string \"value\"");
      }
      turns[t] = turn["value"].get<std::string>();
    }
    out.emplace_back(std::move(turns[0]), std::move(turns[1]));
  }
  return out;
}

std::vector<SampleRequest> sample_sharegpt(std::vector<std::pair<std::string, std::string>> convs,
                                           const CountTokens& count_tokens,
                                           const ShareGptOptions& options) {
  Rng rng(options.seed);
  shuffle(convs, rng);
  std::vector<SampleRequest> out;
  for (auto& [prompt, completion] : convs) {
    if (static_cast<int64_t>(out.size()) >= options.num_prompts) break;
    const int64_t prompt_len = count_tokens(prompt);
    const int64_t output_len = options.output_len ? *options.output_len : count_tokens(completion);
    if (!is_valid_sequence(prompt_len, output_len, options.output_len.has_value())) continue;
    out.push_back(SampleRequest{std::move(prompt), prompt_len, output_len});
  }
  // vLLM's maybe_oversample_requests: random.choices from the survivors.
  if (options.oversample && !out.empty()) {
    const size_t n_survivors = out.size();
    while (static_cast<int64_t>(out.size()) < options.num_prompts) {
      out.push_back(out[rng.below(n_survivors)]);
    }
  }
  return out;
}

Result<std::vector<SampleRequest>> sample_random(const tok::Tokenizer& tokenizer,
                                                 const RandomOptions& o) {
  if (!(o.range_ratio >= 0.0 && o.range_ratio < 1.0)) {
    return invalid_argument("--random-range-ratio must be in [0, 1)");
  }
  if (o.input_len < 0 || o.output_len < 0 || o.prefix_len < 0 || o.num_prompts < 0) {
    return invalid_argument("random dataset lengths and --num-prompts must be non-negative");
  }
  // HF's num_special_tokens_to_add(): what encoding adds around any text (BOS here).
  const int64_t n_special = static_cast<int64_t>(tokenizer.encode("", true).size());
  const int64_t real_input_len = std::max<int64_t>(0, o.input_len - n_special);
  const int64_t input_low = static_cast<int64_t>(std::floor(real_input_len * (1 - o.range_ratio)));
  const int64_t input_high = static_cast<int64_t>(std::ceil(real_input_len * (1 + o.range_ratio)));
  // At least one output token: vLLM never samples a zero-length output.
  const int64_t output_low =
      std::max<int64_t>(1, static_cast<int64_t>(std::floor(o.output_len * (1 - o.range_ratio))));
  const int64_t output_high =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.output_len * (1 + o.range_ratio))));
  if (o.prefix_len + input_low < 1) {
    return invalid_argument("--random-input-len is too small: with " + std::to_string(n_special) +
                            " special tokens and range ratio " + std::to_string(o.range_ratio) +
                            " a prompt could have no tokens");
  }

  const int32_t vocab = tokenizer.vocab_size();
  std::vector<int32_t> allowed;
  for (int32_t id = 0; id < vocab; ++id) {
    if (!tokenizer.is_special(id)) allowed.push_back(id);
  }
  if (allowed.empty()) return invalid_argument("the tokenizer has only special tokens");
  const uint64_t n_allowed = allowed.size();

  Rng rng(o.seed);
  std::vector<int64_t> input_lens(o.num_prompts), output_lens(o.num_prompts),
      offsets(o.num_prompts);
  for (auto& x : input_lens) x = rng.between(input_low, input_high);
  for (auto& x : output_lens) x = rng.between(output_low, output_high);
  for (auto& x : offsets) x = static_cast<int64_t>(rng.below(vocab));
  std::vector<int32_t> prefix(o.prefix_len);
  for (auto& t : prefix) t = allowed[rng.below(n_allowed)];

  std::vector<SampleRequest> out;
  out.reserve(o.num_prompts);
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    std::vector<int32_t> ids = prefix;
    for (int64_t k = 0; k < input_lens[i]; ++k) {
      ids.push_back(allowed[static_cast<uint64_t>(offsets[i] + i + k) % n_allowed]);
    }
    // N ids need not decode to text that encodes back to N ids (merges across token
    // boundaries), so decode, re-encode, and pad with random allowed ids or truncate.
    const size_t target = static_cast<size_t>(o.prefix_len + input_lens[i]);
    std::string prompt;
    for (int round = 0;; ++round) {
      prompt = tokenizer.decode(ids, /*skip_special=*/false);
      ids = tokenizer.encode(prompt, /*add_special_tokens=*/false);
      if (round == kMaxDecodeRetries || ids.size() == target) break;
      if (ids.size() < target) {
        while (ids.size() < target) ids.push_back(allowed[rng.below(n_allowed)]);
      } else {
        ids.resize(target);
      }
    }
    out.push_back(
        SampleRequest{std::move(prompt), static_cast<int64_t>(ids.size()), output_lens[i]});
  }
  return out;
}

}  // namespace qs::bench
