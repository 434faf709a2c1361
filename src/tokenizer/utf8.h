// tokenizer: UTF-8 primitives shared by the tokenizers. Validation follows the Unicode
// standard (no overlongs, no surrogates, nothing past U+10FFFF); the lossy repair replaces
// each "maximal subpart" of an ill-formed sequence with one U+FFFD, as Rust's
// String::from_utf8_lossy and Python's errors="replace" do, so our decode matches HF's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qs::tok {

// U+2581 "▁": SentencePiece's whitespace, in the pieces of every SPM-style vocabulary.
inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length in bytes of the well-formed UTF-8 character that starts at s[pos], or 0 when the
// bytes there are not one (truncated, overlong, surrogate, stray continuation byte...).
// On success stores the code point in *cp when cp is not null.
size_t utf8_char_len(std::string_view s, size_t pos, char32_t* cp = nullptr);

// Number of leading bytes of `s` that form complete, well-formed UTF-8.
size_t utf8_valid_prefix(std::string_view s);

bool utf8_is_valid(std::string_view s);

// Appends the UTF-8 encoding of `cp` (which must be a scalar value) to *out.
void utf8_append(char32_t cp, std::string* out);

// `s` with every ill-formed part replaced by U+FFFD (one per maximal subpart).
std::string utf8_make_valid(std::string_view s);

}  // namespace qs::tok
