// fuzz: PNG files as diffusion::read_png reads them (libpng's simplified API, its errors turned
// into a Status; the image tests' fixtures today, image inputs of the pipelines later). What is
// accepted must hold width x height RGB pixels and survive a write and a read back unchanged.
// libpng is Debian's and not instrumented, so coverage guides only through our side of it.
#include <cstdint>

#include "core/check.h"
#include "diffusion/png_image.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  const std::string path = scratch.write("in.png", {reinterpret_cast<const char*>(data), size});
  int64_t w = 0, h = 0;
  std::vector<uint8_t> rgb;
  if (!qs::diffusion::read_png(path, &w, &h, &rgb).ok()) return 0;
  QS_CHECK(w > 0 && h > 0 && static_cast<int64_t>(rgb.size()) == w * h * 3);
  const std::string out = scratch.dir() + "/out.png";
  QS_CHECK(qs::diffusion::write_png(out, w, h, rgb).ok());
  int64_t w2 = 0, h2 = 0;
  std::vector<uint8_t> rgb2;
  QS_CHECK(qs::diffusion::read_png(out, &w2, &h2, &rgb2).ok());
  QS_CHECK(w2 == w && h2 == h && rgb2 == rgb);
  return 0;
}
