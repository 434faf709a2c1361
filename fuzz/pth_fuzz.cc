// fuzz: one torch.save file (a zip holding a pickle and its storages), as the TAEF2 loader
// reads it. The pickle comes from whoever published the weights: the reader must refuse
// anything but a state_dict without executing it, and every tensor it accepts must lie inside
// what was read (reading its first and last element back is checked by ASan).
#include <cstdint>

#include "core/dtype.h"
#include "fuzz_util.h"
#include "io/pth_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  const std::string path = scratch.write("model.pth", {reinterpret_cast<const char*>(data), size});
  auto tensors = qs::io::read_pth_state_dict(path);
  if (!tensors.ok()) return 0;
  volatile float sink = 0;
  for (const auto& [name, t] : *tensors) {
    const int64_t n = t.numel();
    if (n > 0)
      sink = sink + qs::load_as_f32(t.dtype, t.data, 0) + qs::load_as_f32(t.dtype, t.data, n - 1);
  }
  return 0;
}
