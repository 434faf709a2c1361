// fuzz: model.safetensors.index.json, and the shards it names. The input is the index, then
// up to two shard files (model-00001-of-00002.safetensors, model-00002-of-00002.safetensors)
// after separator lines; Checkpoint::open must refuse every inconsistency with an error.
#include <cstdint>

#include "fuzz_util.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  scratch.reset();
  const auto parts = qs::fuzz::split(data, size, 3);
  scratch.write("model.safetensors.index.json", parts[0]);
  if (!parts[1].empty()) scratch.write("model-00001-of-00002.safetensors", parts[1]);
  if (!parts[2].empty()) scratch.write("model-00002-of-00002.safetensors", parts[2]);
  auto ckpt = qs::io::Checkpoint::open(scratch.dir());
  if (!ckpt.ok()) return 0;
  for (const std::string& name : ckpt->names()) {
    auto t = ckpt->get(name);
    if (t.ok() && t->numel() > 0) (void)qs::load_as_f32(t->dtype, t->data, t->numel() - 1);
    (void)ckpt->file_of(name);
  }
  return 0;
}
