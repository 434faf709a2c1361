// fuzz: one .safetensors file (header length, JSON header, data). Every tensor the reader
// accepts must lie inside the mapping: reading each element back must stay in bounds (ASan).
#include <cstdint>

#include "core/mmap_file.h"
#include "fuzz_util.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  const std::string path =
      scratch.write("model.safetensors", {reinterpret_cast<const char*>(data), size});
  auto file = qs::MappedFile::open(path);
  if (!file.ok()) return 0;
  std::vector<std::pair<std::string, qs::Tensor>> tensors;
  std::map<std::string, std::string> metadata;
  if (!qs::io::read_safetensors(*file, &tensors, &metadata).ok()) return 0;
  volatile float sink = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t n = t.numel();
    if (n > 0)
      sink = sink + qs::load_as_f32(t.dtype, t.data, 0) + qs::load_as_f32(t.dtype, t.data, n - 1);
  }
  return 0;
}
