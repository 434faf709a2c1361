// fuzz: the llama2.c importer. The input is a model .bin (7 int32 header fields then f32
// arrays) and, after a separator line, a tokenizer.bin. The weights are imported into a
// scratch checkpoint, and the tokenizer is read and, when valid, imported and loaded.
#include <cstdint>

#include "fuzz_util.h"
#include "importers/llama2c_import.h"
#include "importers/llama2c_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  scratch.reset();
  const auto parts = qs::fuzz::split(data, size, 2);
  const std::string bin = scratch.write("model.bin", parts[0]);
  if (qs::importers::read_llama2c_config(bin).ok()) {
    (void)qs::importers::import_llama2c_weights(bin, scratch.dir() + "/out");
  }
  const std::string tok_bin = scratch.write("tokenizer.bin", parts[1]);
  if (qs::importers::read_llama2c_tokenizer(tok_bin).ok() &&
      qs::importers::import_llama2c_tokenizer(tok_bin, scratch.dir() + "/tok").ok()) {
    auto t = qs::tok::load_tokenizer(scratch.dir() + "/tok");
    if (t.ok()) qs::fuzz::exercise_tokenizer(**t, parts[0].substr(0, 64), parts[1].substr(0, 64));
  }
  return 0;
}
