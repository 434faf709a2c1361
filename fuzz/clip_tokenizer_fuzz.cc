// fuzz: CLIP's tokenizer (FLUX.1's tokenizer/) from a tokenizer.json, or from vocab.json +
// merges.txt when the first part is empty, then the padded encoding of arbitrary text as the
// image pipeline asks for it. Every id must be a vocabulary id the file could hold.
#include <cstdint>

#include "core/check.h"
#include "core/limits.h"
#include "fuzz_util.h"
#include "tokenizer/clip_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  scratch.reset();
  const std::vector<std::string> parts = qs::fuzz::split(data, size, 4);
  if (!parts[0].empty()) scratch.write("tokenizer.json", parts[0]);
  scratch.write("vocab.json", parts[1]);
  scratch.write("merges.txt", parts[2]);
  auto t = qs::tok::ClipTokenizer::load(scratch.dir());
  if (!t.ok()) return 0;
  for (int64_t len : {int64_t{77}, int64_t{2}, int64_t{1}}) {
    const std::vector<int32_t> ids = (*t)->encode_padded(parts[3], len);
    QS_CHECK(static_cast<int64_t>(ids.size()) == len);
    for (int32_t id : ids) QS_CHECK(id >= 0 && id < qs::limits::kMaxVocab);
  }
  for (int32_t id : (*t)->encode(parts[3])) QS_CHECK(id >= 0 && id < qs::limits::kMaxVocab);
  return 0;
}
