// engine: streaming detokenization, one token at a time, in vLLM's prefix_offset/read_offset
// scheme over Tokenizer::decode. Promises: every piece returned is whole UTF-8 characters,
// SentencePiece leading spaces come out as a full decode would write them (the window keeps
// a few tokens of left context), and the pieces concatenate to the decoded output.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace qs {

class IncrementalDetokenizer {
 public:
  // prompt_ids supply left context only (their text is never returned). The tokenizer must
  // outlive this object.
  IncrementalDetokenizer(const tok::Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                         bool skip_special_tokens);

  // Adds one token and returns the text that became final: empty while a UTF-8 character
  // is incomplete (decode ends in U+FFFD) or for a skipped special token.
  std::string append(int32_t token);
  // Returns what append() still holds back (an incomplete character, which decode renders
  // as U+FFFD); called once the sequence ends. Further appends continue after it.
  std::string flush();

 private:
  // The text the window adds to its context; offsets advance only when text is returned.
  std::string take_new_text(bool hold_incomplete);

  const tok::Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // prompt tail + output tokens; offsets index this
  size_t prefix_offset_ = 0;  // start of the context window decoded on each step
  size_t read_offset_ = 0;    // tokens before this have had their text returned
};

}  // namespace qs
