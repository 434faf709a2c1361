// engine: IncrementalDetokenizer (see detokenizer.h), after vLLM's detokenize_incrementally:
// decode the window [prefix_offset, end) and the context [prefix_offset, read_offset); the
// new text is what the window adds to the context, once it no longer ends in U+FFFD.
#include "engine/detokenizer.h"

#include <algorithm>

namespace qs {
namespace {

// vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET: tokens of left context in the window.
constexpr size_t kContextTokens = 5;
// Prompt tokens kept at all (vLLM keeps offset + 2).
constexpr size_t kPromptTail = kContextTokens + 2;
// Drop ids before the window once this many have piled up, so memory stays bounded.
constexpr size_t kCompactAfter = 256;

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

bool is_continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const tok::Tokenizer& tokenizer,
                                               std::span<const int32_t> prompt_ids,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {
  const size_t tail = std::min(prompt_ids.size(), kPromptTail);
  ids_.assign(prompt_ids.end() - tail, prompt_ids.end());
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kContextTokens ? ids_.size() - kContextTokens : 0;
}

std::string IncrementalDetokenizer::append(int32_t token) {
  ids_.push_back(token);
  return take_new_text(/*hold_incomplete=*/true);
}

std::string IncrementalDetokenizer::flush() {
  return take_new_text(/*hold_incomplete=*/false);
}

std::string IncrementalDetokenizer::take_new_text(bool hold_incomplete) {
  if (read_offset_ == ids_.size()) return {};
  const std::vector<int32_t> context(ids_.begin() + prefix_offset_, ids_.begin() + read_offset_);
  const std::vector<int32_t> window(ids_.begin() + prefix_offset_, ids_.end());
  const std::string prefix_text = tokenizer_.decode(context, skip_special_);
  const std::string new_text = tokenizer_.decode(window, skip_special_);
  // Nothing new (a skipped special token), or the last character is still incomplete.
  if (new_text.size() <= prefix_text.size()) return {};
  if (hold_incomplete && new_text.ends_with(kReplacementChar)) return {};

  size_t start = prefix_text.size();
  // The context normally decodes to a prefix of the window; if a tokenizer disagrees, start
  // at a character boundary rather than mid-character.
  while (start < new_text.size() && is_continuation_byte(new_text[start])) ++start;
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  if (prefix_offset_ >= kCompactAfter) {
    ids_.erase(ids_.begin(), ids_.begin() + prefix_offset_);
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  return new_text.substr(start);
}

}  // namespace qs
