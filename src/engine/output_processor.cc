// engine: OutputProcessor (see output_processor.h). Mirrors vLLM V1's detokenizer update and
// stop checks: token-level stops first, then the new text is searched for stop strings, and
// a stop string found on the last token still turns "length" into "stop".
#include "engine/output_processor.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace qs {

OutputProcessor::OutputProcessor(const tok::Tokenizer& tokenizer, const SamplingParams& params,
                                 std::vector<int32_t> prompt_ids, std::vector<int32_t> eos_ids)
    : params_(params),
      prompt_ids_(std::move(prompt_ids)),
      detokenizer_(tokenizer, prompt_ids_, params.skip_special_tokens),
      stop_checker_(params, std::move(eos_ids)) {}

StepOutput OutputProcessor::append(int32_t token) {
  QS_CHECK_MSG(!finished_, "OutputProcessor::append after the request finished");
  output_ids_.push_back(token);
  // vLLM checks no stop condition, token or string, before min_tokens.
  can_stop_ = static_cast<int64_t>(output_ids_.size()) >= params_.min_tokens;
  const bool stop_token = can_stop_ && stop_checker_.stops_on(token);
  std::string piece;
  // vLLM leaves a stop token out of the text unless the stop is to be kept in the output.
  if (!stop_token || params_.include_stop_str_in_output) piece = detokenizer_.append(token);
  std::string reason;
  if (stop_token) {
    reason = "stop";
    if (stop_checker_.is_stop_token_id(token)) stop_token_id_ = token;
  } else if (static_cast<int64_t>(output_ids_.size()) >= params_.max_tokens) {
    reason = "length";
  }
  if (!reason.empty()) piece += detokenizer_.flush();
  StepOutput out = commit(piece, std::move(reason));
  out.token = token;
  return out;
}

StepOutput OutputProcessor::finish(const std::string& reason) {
  QS_CHECK_MSG(!finished_, "OutputProcessor::finish after the request finished");
  QS_CHECK(!reason.empty());
  return commit(detokenizer_.flush(), reason);
}

StepOutput OutputProcessor::commit(const std::string& piece, std::string reason) {
  text_ += piece;
  if (auto match = can_stop_ ? stop_checker_.find_stop_string(text_, piece.size()) : std::nullopt) {
    // Text that could become a stop string was held back, so the cut never reaches into
    // text already streamed.
    QS_CHECK(match->text_end >= n_streamed_);
    text_.resize(match->text_end);
    reason = "stop";
    stop_token_id_.reset();
    stop_string_ = std::move(match->stop);
  }
  StepOutput out;
  size_t end = text_.size();
  if (reason.empty()) {
    end = std::max(n_streamed_, text_.size() - stop_checker_.holdback(text_));
  } else {
    finished_ = true;
    finish_reason_ = reason;
    out.finished = true;
    out.finish_reason = std::move(reason);
    out.stop_token_id = stop_token_id_;
    out.stop_string = stop_string_;
  }
  out.text = text_.substr(n_streamed_, end - n_streamed_);
  n_streamed_ = end;
  return out;
}

}  // namespace qs
