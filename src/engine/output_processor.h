// engine: per-request output handling for the generation loop. Each sampled token goes in;
// out comes the text that became final (streamable) and whether the request finished and
// why, with vLLM's semantics: EOS / stop_token_ids / stop strings -> "stop", max_tokens ->
// "length". The StepOutput texts of a request concatenate to its final completion text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/detokenizer.h"
#include "engine/sampler.h"
#include "engine/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace qs {

struct StepOutput {
  int32_t token = -1;  // the token append() added; -1 for finish()
  std::string text;    // newly final text; may be empty
  bool finished = false;
  std::string finish_reason;  // "stop" | "length" once finished (or finish()'s reason)
  // On the finishing step, vLLM's stop_reason (see stop_token_id() / stop_string() below).
  std::optional<int32_t> stop_token_id;
  std::optional<std::string> stop_string;
};

class OutputProcessor {
 public:
  // The tokenizer must outlive this object. params should have passed validate().
  OutputProcessor(const tok::Tokenizer& tokenizer, const SamplingParams& params,
                  std::vector<int32_t> prompt_ids, std::vector<int32_t> eos_ids);

  // Adds one sampled token. Must not be called once finished(). A stop token is counted in
  // output_ids() but its text is not in the output unless include_stop_str_in_output.
  StepOutput append(int32_t token);
  // Ends the request for a reason outside the sampling parameters (e.g. "length" when the
  // context is full, "abort"), releasing any text still held back. Must not be finished().
  StepOutput finish(const std::string& reason);

  bool finished() const { return finished_; }
  const std::string& finish_reason() const { return finish_reason_; }
  // vLLM's stop_reason: the stop_token_ids entry or stop string that ended the request;
  // both empty for EOS, "length" and finish().
  std::optional<int32_t> stop_token_id() const { return stop_token_id_; }
  const std::optional<std::string>& stop_string() const { return stop_string_; }

  const std::vector<int32_t>& prompt_ids() const { return prompt_ids_; }
  const std::vector<int32_t>& output_ids() const { return output_ids_; }
  // The completion text so far, including a held-back tail not yet streamed; once finished,
  // exactly the concatenation of every StepOutput::text.
  const std::string& text() const { return text_; }

 private:
  // Appends a piece of decoded text, applies stop strings, and decides what can be streamed.
  // A non-empty reason finishes the request.
  StepOutput commit(const std::string& piece, std::string reason);

  SamplingParams params_;
  std::vector<int32_t> prompt_ids_;
  std::vector<int32_t> output_ids_;
  IncrementalDetokenizer detokenizer_;
  StopChecker stop_checker_;
  std::string text_;
  size_t n_streamed_ = 0;  // bytes of text_ already returned
  bool finished_ = false;
  bool can_stop_ = true;  // min_tokens reached
  std::string finish_reason_;
  std::optional<int32_t> stop_token_id_;
  std::optional<std::string> stop_string_;
};

}  // namespace qs
