// engine: when a request stops, as vLLM decides it: EOS (unless ignore_eos) and
// stop_token_ids by token id; stop strings in the detokenized text, with the text cut before
// them (or after, with include_stop_str_in_output) and, while streaming, the tail that could
// still grow into a stop string held back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"

namespace qs {

struct StopStringMatch {
  size_t text_end = 0;  // the completion text keeps bytes [0, text_end)
  std::string stop;     // the stop string that matched (vLLM's stop_reason)
};

class StopChecker {
 public:
  // eos_ids: the model's end-of-sequence ids (tokenizer EOS and generation_config's
  // eos_token_id list); they stop unless params.ignore_eos.
  StopChecker(const SamplingParams& params, std::vector<int32_t> eos_ids);

  bool is_eos(int32_t token) const;
  bool is_stop_token_id(int32_t token) const;  // one of params.stop_token_ids
  bool stops_on(int32_t token) const { return is_eos(token) || is_stop_token_id(token); }

  // The earliest stop string occurrence that ends inside the last n_new bytes of text (the
  // older text was searched before; a match must touch new text). Equal starts go to the
  // stop string listed first.
  std::optional<StopStringMatch> find_stop_string(std::string_view text, size_t n_new) const;

  // How many bytes at the end of text must not be streamed yet because they are a proper
  // prefix of some stop string (0 when stop strings are kept in the output anyway).
  size_t holdback(std::string_view text) const;

 private:
  std::vector<std::string> stop_;
  std::vector<int32_t> stop_token_ids_;
  std::vector<int32_t> eos_ids_;  // empty when ignore_eos
  bool include_stop_str_;
};

}  // namespace qs
