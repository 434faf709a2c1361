// golden: the whole tiny FLUX pipeline against diffusers' FluxPipeline at the same initial
// noise (an input to both): text encoders, 4 flow-matching steps, VAE decode. The latents
// after every step and the decoded image must match, for dev-style guidance (one forward per
// step) and for true CFG (negative prompt, true_cfg_scale 4: both branches in one batched
// forward); the 8-bit image matches diffusers' PNG to within one level, and our PNG file
// reads back to the same pixels.
#include <filesystem>

#include <gtest/gtest.h>

#include "diffusion/flux_pipeline.h"
#include "diffusion/png_image.h"
#include "flux_reference.h"

namespace qs {
namespace {

using testing::expect_close;

void run_and_compare(const std::string& run, bool cfg) {
  testing::FluxReference ref;
  auto pipe = diffusion::FluxPipeline::load(testing::kFluxPipeline);
  ASSERT_TRUE(pipe.ok()) << pipe.status().to_string();
  ThreadPool pool(2);
  diffusion::FluxRequest req;
  req.prompt = "a photograph of an astronaut riding a horse";  // reference.json
  if (cfg) {
    req.negative_prompt = "blurry, low quality, watermark";
    req.true_cfg_scale = 4.0;
  }
  req.width = req.height = 32;
  req.steps = 4;
  req.guidance_scale = 3.5;
  req.max_sequence_length = 32;
  req.noise = ref.f32(run + "_noise");
  std::vector<std::vector<float>> steps;
  req.on_step = [&](int64_t, int64_t, const std::vector<float>& x) { steps.push_back(x); };
  auto image = (*pipe)->generate(req, pool);
  ASSERT_TRUE(image.ok()) << image.status().to_string();
  ASSERT_EQ(steps.size(), 4u);
  // f32 both sides; the per-forward error (~1e-6, flux_transformer_test) accumulates over
  // the steps, amplified by true_cfg_scale.
  for (size_t i = 0; i < steps.size(); ++i) {
    expect_close(steps[i], ref.f32(run + "_step" + std::to_string(i)), 2e-5f, 1e-4f,
                 run + " latents after step " + std::to_string(i));
  }
  const auto want = ref.f32(run + "_image");
  expect_close(image->rgb, want, 1e-5f, 1e-4f, run + " image");

  // 8-bit pixels against diffusers' PNG, then our PNG round trip.
  int64_t w = 0, h = 0;
  std::vector<uint8_t> theirs;
  ASSERT_TRUE(
      diffusion::read_png((testing::kFluxFixtures / (run + ".png")).string(), &w, &h, &theirs)
          .ok());
  ASSERT_EQ(w, 32);
  ASSERT_EQ(h, 32);
  const std::vector<uint8_t> ours = diffusion::to_rgb8(image->rgb);
  int max_diff = 0;
  for (size_t i = 0; i < ours.size(); ++i)
    max_diff = std::max(max_diff, std::abs(ours[i] - theirs[i]));
  EXPECT_LE(max_diff, 1) << run;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("qs_flux_" + run + ".png")).string();
  ASSERT_TRUE(diffusion::write_png(path, 32, 32, ours).ok());
  std::vector<uint8_t> back;
  ASSERT_TRUE(diffusion::read_png(path, &w, &h, &back).ok());
  EXPECT_EQ(back, ours);
  std::filesystem::remove(path);
}

TEST(FluxPipeline, DevGuidanceMatchesDiffusers) {
  run_and_compare("dev", false);
}

TEST(FluxPipeline, TrueCfgMatchesDiffusers) {
  run_and_compare("cfg", true);
}

TEST(FluxPipeline, RejectsBadRequests) {
  auto pipe = diffusion::FluxPipeline::load(testing::kFluxPipeline);
  ASSERT_TRUE(pipe.ok());
  ThreadPool pool(1);
  diffusion::FluxRequest req;
  req.prompt = "x";
  req.width = 30;  // not a multiple of 4 (VAE scale 2 x packing 2)
  req.height = 32;
  req.steps = 1;
  req.max_sequence_length = 32;
  EXPECT_FALSE((*pipe)->generate(req, pool).ok());
  req.width = 32;
  req.noise.assign(10, 0.0f);  // wrong size
  auto r = (*pipe)->generate(req, pool);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[64, 16]"), std::string::npos) << r.status().message();
  EXPECT_FALSE(diffusion::FluxPipeline::load(testing::kFluxPipeline + "/vae").ok());
}

}  // namespace
}  // namespace qs
