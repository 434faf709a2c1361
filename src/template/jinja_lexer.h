// template: splits a template into text and tag tokens, applying jinja2's whitespace
// rules on the way (`-`/`+` markers, trim_blocks, lstrip_blocks, one trailing newline
// dropped, \r\n normalised), so the parser only sees the text that will really be printed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs::jinja {

enum class TokenType {
  kText,        // literal template data, already whitespace-adjusted
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded value
  kInt,
  kFloat,
  kOp,  // operator or punctuation, text holds it ("==", "(", "|" ...)
  kEof,
};

struct Token {
  TokenType type;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

struct LexOptions {
  // HF's chat-template environment sets both.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors (unclosed tag or comment, bad character, unbalanced bracket) name the line.
Result<std::vector<Token>> tokenize(std::string_view source, const LexOptions& options);

}  // namespace qs::jinja
