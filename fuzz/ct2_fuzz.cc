// fuzz: CTranslate2 model.bin and `quantserve import ct2`. The input is three parts (fuzz_util.h
// separator): model.bin, tokenizer.json and CTranslate2's config.json. Every variable the
// reader accepts is read back as floats and as a scalar (its bytes must lie inside the mapping:
// ASan), then the folder is imported into a scratch directory.
#include <cstdint>

#include "core/check.h"
#include "fuzz_util.h"
#include "importers/ct2_whisper_import.h"
#include "io/ct2_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  scratch.reset();
  const std::vector<std::string> parts = qs::fuzz::split(data, size, 3);
  const std::string model_bin = scratch.write("model.bin", parts[0]);
  scratch.write("tokenizer.json", parts[1]);
  if (!parts[2].empty()) scratch.write("config.json", parts[2]);
  auto model = qs::io::Ct2Model::open(model_bin);
  if (!model.ok()) return 0;
  volatile float sink = 0;
  for (const auto& v : model->variables()) {
    auto values = model->float_values(v.name);
    if (values.ok()) {
      QS_CHECK(static_cast<int64_t>(values->size()) == v.numel());
      if (!values->empty()) sink = sink + values->front() + values->back();
    }
    (void)model->scalar(v.name);
  }
  for (const auto& [alias, target] : model->aliases()) QS_CHECK(model->find(alias) != nullptr);
  (void)qs::importers::import_ct2_whisper(scratch.dir(), scratch.dir() + "/out", std::nullopt);
  return 0;
}
