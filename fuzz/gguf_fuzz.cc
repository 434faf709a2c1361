// fuzz: GGUF files and `quantserve import gguf`. The input is one .gguf file; it is mapped
// as the importer maps it, every metadata value is read back through the typed getters,
// every tensor the reader accepts is dequantized (it must lie inside the mapping: ASan), then
// the importer writes the config and weights, and separately the tokenizer (vocabulary-only
// files have no weights), into scratch directories; an imported tokenizer is loaded and used.
#include <cstdint>

#include "core/check.h"
#include "fuzz_util.h"
#include "importers/gguf_import.h"
#include "importers/gguf_tokenizer.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  scratch.reset();
  const std::string path = scratch.write("model.gguf", {reinterpret_cast<const char*>(data), size});
  auto gguf = qs::io::GgufFile::open(path);
  if (!gguf.ok()) return 0;
  for (const auto& [key, value] : gguf->metadata()) {
    (void)gguf->get_string(key);
    (void)gguf->get_int(key);
    (void)gguf->get_float(key);
    (void)gguf->get_bool(key);
    (void)gguf->get_string_array(key);
    (void)gguf->get_int_array(key);
    (void)gguf->get_float_array(key);
    (void)gguf->get_token_id(key, 1000);
  }
  volatile float sink = 0;
  for (const auto& t : gguf->tensors()) {
    const std::vector<float> v = gguf->dequantize(t);
    QS_CHECK(static_cast<int64_t>(v.size()) == t.numel());
    if (!v.empty()) sink = sink + v.front() + v.back();
    (void)qs::importers::gguf_llama_hf_name(t.name);
  }
  (void)qs::importers::gguf_llama_hf_config(*gguf, qs::DType::kBF16);
  (void)qs::importers::import_gguf_weights(*gguf, scratch.dir() + "/weights", qs::DType::kBF16);
  const std::string tok_dir = scratch.dir() + "/tok";
  if (!qs::importers::import_gguf_tokenizer(*gguf, tok_dir).ok()) return 0;
  auto tokenizer = qs::tok::load_tokenizer(tok_dir);
  if (tokenizer.ok()) qs::fuzz::exercise_tokenizer(**tokenizer, "Hello world", "\x01\x00\x02\x00");
  return 0;
}
