// tokenizer: the GPT-2 byte <-> character map (see byte_level.h).
#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/utf8.h"

namespace qs::tok {
namespace {

struct ByteMap {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // indexed by code point < 324; -1 = not in the map

  ByteMap() {
    to_byte.fill(-1);
    // GPT-2 encoder.py: bytes '!'..'~', '¡'..'¬', '®'..'ÿ' keep their code point; the rest
    // are numbered 256, 257, ... in byte order.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const ByteMap& map = byte_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(map.to_char[static_cast<uint8_t>(c)], &out);
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  const ByteMap& map = byte_map();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp = 0;
    const size_t n = utf8_char_len(text, pos, &cp);
    if (n == 0 || cp >= map.to_byte.size() || map.to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(map.to_byte[cp]));
    pos += n;
  }
  return out;
}

}  // namespace qs::tok
