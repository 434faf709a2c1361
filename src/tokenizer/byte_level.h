// tokenizer: GPT-2's reversible byte <-> printable-character map ("bytes_to_unicode"), used by
// every byte-level BPE vocabulary (GPT-2, Llama-3, Qwen2) to store raw bytes as visible text:
// printable Latin-1 bytes stand for themselves, the other 68 bytes become U+0100..U+0143
// (so " " is "Ġ" and "\n" is "Ċ").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace qs::tok {

// Raw bytes -> their byte-level text (always valid UTF-8).
std::string byte_level_encode(std::string_view bytes);

// Byte-level text -> raw bytes; nullopt when `text` holds a character outside the map (then
// the text was not byte-level encoded, e.g. an added token's content) or is not UTF-8.
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace qs::tok
