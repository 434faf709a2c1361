// tokenizer: the Unicode data behind NFC (utf8_nfc.h), generated into utf8_nfc_tables.cc by
// scripts/gen_utf8_nfc_tables.py. Every table is sorted by its first field(s) for binary search.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qs::tok::nfc {

struct Decomposition {
  char32_t cp;
  uint16_t offset;  // into kDecompositionData
  uint8_t length;   // full (recursive) canonical decomposition
};
struct CombiningClassRange {
  char32_t first, last;
  uint8_t ccc;  // canonical combining class, non-zero
};
struct Composition {
  char32_t first, second, composite;  // primary composites only
};

extern const Decomposition kDecompositions[];
extern const size_t kNumDecompositions;
extern const char32_t kDecompositionData[];
extern const CombiningClassRange kCombiningClasses[];
extern const size_t kNumCombiningClasses;
extern const Composition kCompositions[];
extern const size_t kNumCompositions;

}  // namespace qs::tok::nfc
