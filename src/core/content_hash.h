// core: the hash that names a multimodal item's source bytes (an image, a sound clip, a
// video) in the prefix cache's block keys. 64-bit FNV-1a: cheap next to decoding the media,
// and a collision needs two prompts whose placeholders line up as well.
#pragma once

#include <cstdint>
#include <string_view>

namespace qs {

// Never 0, which the engine reads as "not cacheable".
inline uint64_t content_hash(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a's offset basis and prime
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

}  // namespace qs
