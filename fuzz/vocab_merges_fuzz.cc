// fuzz: vocab.json + merges.txt with tokenizer_config.json, loaded as a
// checkpoint directory, then encode/decode of arbitrary bytes and ids (fuzz_util.h).
#include <cstdint>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return qs::fuzz::run_tokenizer_dir(data, size,
                                     {"vocab.json", "merges.txt", "tokenizer_config.json"});
}
