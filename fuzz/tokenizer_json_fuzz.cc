// fuzz: HF tokenizer.json (byte-level BPE or SentencePiece-style) with its tokenizer_config.json,
// loaded as a checkpoint directory, then encode/decode of arbitrary bytes and ids (fuzz_util.h).
#include <cstdint>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return qs::fuzz::run_tokenizer_dir(data, size, {"tokenizer.json", "tokenizer_config.json"});
}
