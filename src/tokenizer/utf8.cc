// tokenizer: UTF-8 validation and lossy repair (see utf8.h).
#include "tokenizer/utf8.h"

#include "core/check.h"

namespace qs::tok {
namespace {

// The well-formed byte sequences of Unicode 15, Table 3-7: the accepted range of the second
// byte depends on the first; later continuation bytes are always 80..BF.
struct LeadInfo {
  size_t len;
  uint8_t lo2, hi2;  // allowed range of the second byte
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing past U+10FFFF
  return {0, 0, 0};                       // 80..C1, F5..FF never start a character
}

// Number of bytes at s[pos] that belong to the character (or to its maximal ill-formed
// subpart); *ok tells which.
size_t scan_char(std::string_view s, size_t pos, bool* ok, char32_t* cp) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  const LeadInfo info = lead_info(b0);
  if (info.len == 1) {
    *ok = true;
    if (cp) *cp = b0;
    return 1;
  }
  if (info.len == 0) {
    *ok = false;
    return 1;
  }
  char32_t value = b0 & (0xFF >> (info.len + 1));
  size_t n = 1;
  for (; n < info.len; ++n) {
    if (pos + n >= s.size()) break;
    const auto b = static_cast<uint8_t>(s[pos + n]);
    const uint8_t lo = n == 1 ? info.lo2 : 0x80;
    const uint8_t hi = n == 1 ? info.hi2 : 0xBF;
    if (b < lo || b > hi) break;
    value = (value << 6) | (b & 0x3F);
  }
  *ok = n == info.len;
  if (*ok && cp) *cp = value;
  return n;
}

}  // namespace

size_t utf8_char_len(std::string_view s, size_t pos, char32_t* cp) {
  if (pos >= s.size()) return 0;
  bool ok = false;
  const size_t n = scan_char(s, pos, &ok, cp);
  return ok ? n : 0;
}

size_t utf8_valid_prefix(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t n = utf8_char_len(s, pos);
    if (n == 0) break;
    pos += n;
  }
  return pos;
}

bool utf8_is_valid(std::string_view s) {
  return utf8_valid_prefix(s) == s.size();
}

void utf8_append(char32_t cp, std::string* out) {
  QS_CHECK(cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF));
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_make_valid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    bool ok = false;
    const size_t n = scan_char(s, pos, &ok, nullptr);
    if (ok) {
      out.append(s.substr(pos, n));
    } else {
      utf8_append(kReplacementChar, &out);
    }
    pos += n;
  }
  return out;
}

}  // namespace qs::tok
