// golden: `--vae-decoder tiny`. The shipped TAEF2 (models/taef2; its accuracy against PyTorch
// is flux_taef2_test's) decodes FLUX.2's 32-channel latents at 8x, so the pipeline here is the
// tiny one made to produce those: its transformer widened to 128 packed channels (4 x 32) and
// its vae/config.json to 32 latent channels over four levels (8x); vae/'s weights are never
// read. The image generate() returns must be the tiny decoder's image of the final latents
// exactly, and a pipeline whose latents the decoder cannot take is refused with the reason.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "core/json.h"
#include "diffusion/flux_pipeline.h"
#include "diffusion/tiny_autoencoder.h"
#include "flux_reference.h"
#include "io/checkpoint.h"
#include "models/component.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

const std::string kTaef2 = std::string(QS_SOURCE_DIR) + "/models/taef2";

class FluxTinyVae : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qs_flux_tiny_vae_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    pipe_ = dir_ / "pipe";
    fs::copy(testing::kFluxPipeline, pipe_, fs::copy_options::recursive);
    // The transformer at 128 packed channels: the fixture's weights where the shapes agree,
    // small random ones for x_embedder and proj_out.
    const fs::path t = pipe_ / "transformer";
    auto config = read_json((t / "config.json").string());
    ASSERT_TRUE(config.ok());
    (*config)["in_channels"] = 128;
    (*config)["out_channels"] = 128;
    ASSERT_TRUE(write_json((t / "config.json").string(), *config).ok());
    auto source =
        io::Checkpoint::open(testing::kFluxPipeline + "/transformer", "diffusion_pytorch_model");
    ASSERT_TRUE(source.ok());
    auto c = models::Component::open_config(t.string());
    ASSERT_TRUE(c.ok());
    auto flux = diffusion::read_flux_config(*c);
    ASSERT_TRUE(flux.ok());
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& spec : diffusion::flux_tensor_specs(*flux)) {
      auto have = source->get(spec.name);
      if (have.ok() && have->shape == spec.shape) {
        tensors.emplace_back(spec.name, Tensor::from_f32(DType::kF32, spec.shape, have->to_f32()));
        continue;
      }
      int64_t n = 1;
      for (int64_t d : spec.shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = nd(rng);
      tensors.emplace_back(spec.name, Tensor::from_f32(DType::kF32, spec.shape, v));
    }
    ASSERT_TRUE(
        io::write_safetensors((t / "diffusion_pytorch_model.safetensors").string(), tensors).ok());
    const fs::path v = pipe_ / "vae" / "config.json";
    auto vae = read_json(v.string());
    ASSERT_TRUE(vae.ok());
    (*vae)["latent_channels"] = 32;
    (*vae)["block_out_channels"] = {8, 16, 16, 16};
    (*vae)["down_block_types"] = std::vector<std::string>(4, "DownEncoderBlock2D");
    (*vae)["up_block_types"] = std::vector<std::string>(4, "UpDecoderBlock2D");
    ASSERT_TRUE(write_json(v.string(), *vae).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_, pipe_;
};

TEST_F(FluxTinyVae, DecodesTheFinalLatentsWithTheTinyDecoder) {
  diffusion::FluxLoadOptions options;
  options.tiny_vae = kTaef2;
  auto pipe = diffusion::FluxPipeline::load(pipe_.string(), options);
  ASSERT_TRUE(pipe.ok()) << pipe.status().to_string();
  diffusion::FluxRequest req;
  req.prompt = "a photograph of an astronaut riding a horse";
  req.width = req.height = 64;
  req.steps = 2;
  req.max_sequence_length = 32;
  ThreadPool pool(2);
  auto img = (*pipe)->generate(req, pool);
  ASSERT_TRUE(img.ok()) << img.status().to_string();

  // The same latents through TinyAutoencoder directly: unpack [4 x 4 tokens, 128] into
  // [32, 8, 8] (64 px / 8; no scaling, no shift), decode, clamp.
  const int64_t c = 32, side = 8, half = 4;
  ASSERT_EQ(img->latents.size(), static_cast<size_t>(half * half * 4 * c));
  std::vector<float> z(static_cast<size_t>(c * side * side));
  for (int64_t r = 0; r < half; ++r) {
    for (int64_t q = 0; q < half; ++q) {
      for (int64_t cc = 0; cc < c; ++cc) {
        for (int64_t dy = 0; dy < 2; ++dy) {
          for (int64_t dx = 0; dx < 2; ++dx) {
            z[(cc * side + 2 * r + dy) * side + 2 * q + dx] =
                img->latents[(r * half + q) * 4 * c + cc * 4 + dy * 2 + dx];
          }
        }
      }
    }
  }
  auto tiny = diffusion::TinyAutoencoder::load("", kTaef2 + "/taef2_decoder.pth");
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  std::vector<float> decoded;
  ASSERT_TRUE(tiny->decode(z.data(), 1, side, side, &decoded, pool).ok());
  ASSERT_EQ(img->rgb.size(), static_cast<size_t>(64 * 64 * 3));
  std::vector<float> want(img->rgb.size());
  for (int64_t p = 0; p < 64 * 64; ++p) {
    for (int64_t k = 0; k < 3; ++k) {
      want[p * 3 + k] = std::clamp(decoded[k * 64 * 64 + p], 0.0f, 1.0f);
    }
  }
  EXPECT_EQ(img->rgb, want);
  // Not a blank image: the decoder did run on something.
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  EXPECT_LT(*lo + 0.05f, *hi);
}

TEST_F(FluxTinyVae, CliAndRefusals) {
  const std::string png = (dir_ / "tiny.png").string();
  const std::string common =
      " --prompt 'a cat' --width 64 --height 64 --steps 2 --max-sequence-length 32 --out " + png;
  auto ok = run_cli("generate-image --model " + pipe_.string() + " --vae-decoder tiny --tiny-vae " +
                    kTaef2 + common);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(fs::exists(png));
  // vae/'s weights are 4-channel: only the tiny decoder can serve this pipeline.
  auto full = run_cli("generate-image --model " + pipe_.string() + common);
  EXPECT_NE(full.exit_code, 0);
  // FLUX.1-shaped latents (the fixture's 4 channels at 2x) are not TAEF2's.
  auto mismatch = run_cli("generate-image --model " + testing::kFluxPipeline +
                          " --vae-decoder tiny --tiny-vae " + kTaef2 + common);
  EXPECT_NE(mismatch.exit_code, 0);
  EXPECT_NE(mismatch.output.find("32-channel latents at 8x"), std::string::npos) << mismatch.output;
  auto bad = run_cli("generate-image --model " + pipe_.string() + " --vae-decoder small" + common);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--vae-decoder must be full or tiny"), std::string::npos);
  auto missing = run_cli("generate-image --model " + pipe_.string() +
                         " --vae-decoder tiny --tiny-vae " + dir_.string() + common);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("_decoder.pth"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace qs
