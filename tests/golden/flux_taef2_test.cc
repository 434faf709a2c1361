// golden: the trained TAEF2 tiny autoencoder (../shared/data/models/taef2, read from its .pth
// state_dicts) against PyTorch (scripts/golden/gen_taef2_fixtures.py) on a real photograph:
// the encoder's latents, the decoder's image, and the round trip's PSNR against the photo
// (PyTorch's: reference.json). Also the .pth reader's refusals.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "../common/shared_data.h"
#include "diffusion/png_image.h"
#include "diffusion/tiny_autoencoder.h"
#include "flux_reference.h"
#include "io/pth_reader.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::expect_close;

const fs::path kTaef2Fixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/taef2";

std::map<std::string, std::vector<float>> reference() {
  auto file = MappedFile::open((kTaef2Fixtures / "reference.safetensors").string());
  QS_CHECK(file.ok());
  std::vector<std::pair<std::string, Tensor>> tensors;
  QS_CHECK(io::read_safetensors(*file, &tensors, nullptr).ok());
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : tensors) out[name] = t.to_f32();
  return out;
}

double psnr(const std::vector<float>& a, const std::vector<float>& b) {
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::clamp(a[i], 0.0f, 1.0f) - b[i];
    se += d * d;
  }
  return 10.0 * std::log10(1.0 / (se / static_cast<double>(a.size())));
}

TEST(Taef2, RoundTripOfAPhotographMatchesPyTorch) {
  QS_SKIP_WITHOUT_SHARED_DATA("models/taef2/taef2_decoder.pth");
  const std::string dir = testing::shared_data_dir() + "/models/taef2/";
  auto tae = diffusion::TinyAutoencoder::load(dir + "taef2_encoder.pth", dir + "taef2_decoder.pth");
  ASSERT_TRUE(tae.ok()) << tae.status().to_string();
  EXPECT_EQ(tae->latent_channels(), 32);
  int64_t w = 0, h = 0;
  std::vector<uint8_t> rgb8;
  ASSERT_TRUE(
      diffusion::read_png((kTaef2Fixtures / "chelsea_128.png").string(), &w, &h, &rgb8).ok());
  ASSERT_EQ(w, 128);
  ASSERT_EQ(h, 128);
  std::vector<float> x(3 * 128 * 128);  // HWC uint8 -> CHW [0, 1], as TF.to_tensor
  for (int64_t p = 0; p < 128 * 128; ++p) {
    for (int64_t c = 0; c < 3; ++c) x[c * 128 * 128 + p] = rgb8[p * 3 + c] / 255.0f;
  }
  ThreadPool pool(2);
  auto ref = reference();
  std::vector<float> latents, decoded;
  ASSERT_TRUE(tae->encode(x.data(), 1, 128, 128, &latents, pool).ok());
  // f32 both sides, 40-odd convolutions deep: differences of summation order, ~5e-6.
  expect_close(latents, ref["latents"], 2e-5f, 1e-4f, "taef2 latents");
  ASSERT_TRUE(tae->decode(latents.data(), 1, 16, 16, &decoded, pool).ok());
  expect_close(decoded, ref["decoded"], 2e-5f, 1e-4f, "taef2 decoded");
  const double ours = psnr(decoded, x), theirs = psnr(ref["decoded"], x);
  std::printf("taef2 round trip PSNR: %.3f dB (PyTorch %.3f dB)\n", ours, theirs);
  EXPECT_NEAR(ours, theirs, 0.01);
  EXPECT_GT(ours, 25.0);  // a trained autoencoder, not noise
  EXPECT_FALSE(tae->encode(x.data(), 1, 100, 128, &latents, pool).ok());
}

TEST(Taef2, PthReaderRefusesWhatIsNotAStateDict) {
  const fs::path dir = fs::temp_directory_path() / "qs_pth_test";
  fs::create_directories(dir);
  const std::string junk = (dir / "junk.pth").string();
  std::ofstream(junk) << "not a zip file at all, just some text";
  EXPECT_FALSE(io::read_pth_state_dict(junk).ok());
  EXPECT_FALSE(io::read_pth_state_dict((dir / "missing.pth").string()).ok());
  // A zip that is a safetensors file, not a torch.save archive.
  EXPECT_FALSE(io::read_pth_state_dict((kTaef2Fixtures / "reference.safetensors").string()).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qs
