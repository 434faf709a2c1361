// golden: `quantserve compare-images` on the tiny FLUX pipeline: against itself every prompt
// is identical (PSNR null, SSIM 1, latent cosine 1); against a copy whose VAE output bias is
// shifted, the latents still agree (cosine 1) while the images differ by the shift, which the
// report's max error shows; report.json and grid.png are written; bad input is an error.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "diffusion/png_image.h"
#include "flux_reference.h"
#include "io/checkpoint.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

TEST(CompareImagesCli, IdenticalAndShiftedVae) {
  const fs::path dir = fs::temp_directory_path() / ("qs_compare_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string prompts = (dir / "prompts.txt").string();
  std::ofstream(prompts) << "a photograph of an astronaut riding a horse\nA cat in a hat\n";
  const std::string common = " --prompts " + prompts +
                             " --seed 3 --steps 2 --width 32 --height 32 --max-sequence-length 32"
                             " --threads 2";
  auto r = run_cli("compare-images --reference " + testing::kFluxPipeline + " --candidate " +
                       testing::kFluxPipeline + common,
                   false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto same = nlohmann::json::parse(r.output);
  ASSERT_EQ(same["per_prompt"].size(), 2u);
  for (const auto& p : same["per_prompt"]) {
    EXPECT_TRUE(p["psnr_db"].is_null());
    EXPECT_TRUE(p["identical"].get<bool>());
    EXPECT_DOUBLE_EQ(p["ssim"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(p["latent_cosine_similarity"].get<double>(), 1.0);
  }

  // The candidate: the same pipeline with vae decoder.conv_out.bias + 0.2 (in [-1, 1] units,
  // i.e. +0.1 * 255 = 25.5 levels before clamping).
  const fs::path cand = dir / "candidate";
  fs::copy(testing::kFluxPipeline, cand, fs::copy_options::recursive);
  const std::string vae_file = (cand / "vae/diffusion_pytorch_model.safetensors").string();
  {
    auto file = MappedFile::open(vae_file);
    ASSERT_TRUE(file.ok());
    std::vector<std::pair<std::string, Tensor>> tensors, out;
    ASSERT_TRUE(io::read_safetensors(*file, &tensors, nullptr).ok());
    for (auto& [name, t] : tensors) {
      std::vector<float> v = t.to_f32();
      if (name == "decoder.conv_out.bias") {
        for (float& x : v) x += 0.2f;
      }
      out.emplace_back(name, Tensor::from_f32(DType::kF32, t.shape, v));
    }
    ASSERT_TRUE(io::write_safetensors(vae_file, out).ok());
  }
  const std::string out_dir = (dir / "out").string();
  r = run_cli("compare-images --reference " + testing::kFluxPipeline + " --candidate " +
                  cand.string() + common + " --out-dir " + out_dir,
              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto diff = nlohmann::json::parse(r.output);
  for (const auto& p : diff["per_prompt"]) {
    EXPECT_FALSE(p["identical"].get<bool>());
    EXPECT_DOUBLE_EQ(p["latent_cosine_similarity"].get<double>(), 1.0);
    EXPECT_LE(p["max_abs_error"].get<int>(), 26);
    EXPECT_GE(p["max_abs_error"].get<int>(), 20);
    EXPECT_LT(p["psnr_db"].get<double>(), 40.0);
  }
  EXPECT_TRUE(fs::exists(out_dir + "/report.json"));
  int64_t w = 0, h = 0;
  std::vector<uint8_t> grid;
  ASSERT_TRUE(diffusion::read_png(out_dir + "/grid.png", &w, &h, &grid).ok());
  EXPECT_EQ(w, 68);  // 32 | 4 | 32
  EXPECT_EQ(h, 68);  // two rows

  EXPECT_EQ(run_cli("compare-images --reference " + testing::kFluxPipeline + " --candidate " +
                    (dir / "nope").string() + common)
                .exit_code,
            1);
  EXPECT_EQ(run_cli("compare-images --reference x --candidate y").exit_code, 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qs
