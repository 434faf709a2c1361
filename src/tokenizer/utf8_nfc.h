// tokenizer: Unicode Normalization Form C (canonical decomposition, canonical ordering,
// canonical composition; UAX #15), which HF's NFC normalizer and Qwen2Tokenizer apply before
// tokenizing. Tables come from scripts/gen_utf8_nfc_tables.py (Python's unicodedata, Unicode 14).
#pragma once

#include <string>
#include <string_view>

namespace qs::tok {

// `s` in NFC. Bytes that are not well-formed UTF-8 are kept as they are and act as boundaries
// (nothing composes across them). Text made only of code points below U+0300, which includes
// all ASCII, is returned unchanged without further work.
std::string utf8_nfc(std::string_view s);

}  // namespace qs::tok
