// tokenizer: NFC normalization (see utf8_nfc.h), following UAX #15 section 1.3 and the
// Hangul algorithms of the Unicode standard section 3.12.
#include "tokenizer/utf8_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/utf8.h"
#include "tokenizer/utf8_nfc_tables.h"

namespace qs::tok {
namespace {

// Hangul syllables decompose and compose arithmetically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const nfc::CombiningClassRange* begin = nfc::kCombiningClasses;
  const nfc::CombiningClassRange* end = begin + nfc::kNumCombiningClasses;
  auto it = std::upper_bound(
      begin, end, cp, [](char32_t c, const nfc::CombiningClassRange& r) { return c < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const nfc::Decomposition* begin = nfc::kDecompositions;
  const nfc::Decomposition* end = begin + nfc::kNumDecompositions;
  auto it = std::lower_bound(begin, end, cp,
                             [](const nfc::Decomposition& d, char32_t c) { return d.cp < c; });
  if (it != end && it->cp == cp) {
    out->insert(out->end(), nfc::kDecompositionData + it->offset,
                nfc::kDecompositionData + it->offset + it->length);
  } else {
    out->push_back(cp);
  }
}

// The primary composite of (first, second), or 0 when they do not compose.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const nfc::Composition* begin = nfc::kCompositions;
  const nfc::Composition* end = begin + nfc::kNumCompositions;
  auto it = std::lower_bound(begin, end, std::pair{first, second},
                             [](const nfc::Composition& c, const std::pair<char32_t, char32_t>& k) {
                               return c.first != k.first ? c.first < k.first : c.second < k.second;
                             });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

// NFC of one well-formed run, appended to *out.
void nfc_run(std::string_view run, std::string* out) {
  const bool inert =
      std::all_of(run.begin(), run.end(), [](char c) { return static_cast<uint8_t>(c) < 0xCC; });
  if (inert) {  // lead bytes below 0xCC only start code points below U+0300
    out->append(run);
    return;
  }
  std::vector<char32_t> cps;
  cps.reserve(run.size());
  for (size_t pos = 0; pos < run.size();) {
    char32_t cp = 0;
    const size_t n = utf8_char_len(run, pos, &cp);
    decompose(cp, &cps);
    pos += n;
  }
  // Canonical ordering: stable sort of every run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j, [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
  // Canonical composition: each character joins the last starter unless something between
  // them blocks it (a starter, or a mark of the same or higher class).
  std::vector<char32_t> res;
  res.reserve(cps.size());
  size_t starter = SIZE_MAX;
  uint8_t last_ccc = 0;
  for (char32_t cp : cps) {
    const uint8_t ccc = combining_class(cp);
    if (starter != SIZE_MAX) {
      const bool adjacent = res.size() == starter + 1;
      if (adjacent || (last_ccc != 0 && last_ccc < ccc)) {
        if (const char32_t c = compose(res[starter], cp)) {
          res[starter] = c;
          continue;
        }
      }
    }
    if (ccc == 0) starter = res.size();
    last_ccc = ccc;
    res.push_back(cp);
  }
  for (char32_t cp : res) utf8_append(cp, out);
}

}  // namespace

std::string utf8_nfc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t valid = utf8_valid_prefix(s.substr(pos));
    nfc_run(s.substr(pos, valid), &out);
    pos += valid;
    if (pos < s.size()) out.push_back(s[pos++]);  // an ill-formed byte, kept as is
  }
  return out;
}

}  // namespace qs::tok
