// fuzz: the SentencePiece Unigram tokenizer.json of T5 (FLUX.1's tokenizer_2/), then the padded
// encoding of arbitrary text. Text it cannot normalize is an error, never a crash; every id is
// inside the vocabulary.
#include <cstdint>

#include "core/check.h"
#include "fuzz_util.h"
#include "tokenizer/unigram_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  scratch.reset();
  const std::vector<std::string> parts = qs::fuzz::split(data, size, 2);
  scratch.write("tokenizer.json", parts[0]);
  auto t = qs::tok::UnigramTokenizer::load(scratch.dir());
  if (!t.ok()) return 0;
  for (int64_t len : {int64_t{512}, int64_t{1}}) {
    auto ids = (*t)->encode_padded(parts[1], len);
    if (!ids.ok()) continue;
    QS_CHECK(static_cast<int64_t>(ids->size()) == len);
    for (int32_t id : *ids) QS_CHECK(id >= 0 && id < (*t)->vocab_size());
  }
  return 0;
}
