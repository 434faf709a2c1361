// golden: the whole tiny Wan2.2 pipelines against diffusers' WanPipeline and
// WanImageToVideoPipeline at the same initial noise (an input to both): UMT5, 4 UniPC steps of
// one or two experts with CFG, the VAE decode. The latents after every step and the final
// frames must match for T2V-A14B (two experts, two guidance scales), TI2V-5B (per-token
// timesteps; text to video and, from an image, image to video) and I2V-A14B (36-channel
// input). Also: the image an I2V request of another size is prepared from (Pillow's Lanczos),
// and the errors a bad pipeline or request gets before anything runs.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "../common/reference_tensors.h"
#include "diffusion/wan_pipeline.h"
#include "flux_reference.h"
#include "vision/image_file.h"
#include "vision/vae_image_input.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::expect_close;

const fs::path kWan = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/wan";

struct Run {
  std::string fixture, run;
  int64_t size;
  bool image;
  double guidance, guidance_2;  // guidance_2 < 0: not set
};

diffusion::WanRequest request(const testing::ReferenceTensors& ref, const Run& r) {
  diffusion::WanRequest req;
  req.prompt = "a photograph of an astronaut riding a horse";  // reference.json
  req.negative_prompt = "blurry, low quality, watermark";
  req.width = req.height = r.size;
  req.num_frames = 9;
  req.steps = 4;
  req.guidance_scale = r.guidance;
  if (r.guidance_2 >= 0) req.guidance_scale_2 = r.guidance_2;
  req.max_sequence_length = 16;
  req.noise = ref.f32(r.run + "_noise");
  if (r.image) req.image = ref.f32(r.run + "_image_in");
  return req;
}

void run_and_compare(const Run& r) {
  SCOPED_TRACE(r.fixture + "/" + r.run);
  testing::ReferenceTensors ref(kWan / r.fixture / "reference.safetensors");
  auto pipe = diffusion::WanPipeline::load((kWan / r.fixture / "pipeline").string());
  ASSERT_TRUE(pipe.ok()) << pipe.status().to_string();
  ThreadPool pool(2);
  diffusion::WanRequest req = request(ref, r);
  std::vector<std::vector<float>> steps;
  req.on_step = [&](int64_t, int64_t, const std::vector<float>& x) { steps.push_back(x); };
  auto video = (*pipe)->generate(req, pool);
  ASSERT_TRUE(video.ok()) << video.status().to_string();
  ASSERT_EQ(steps.size(), 4u);
  // f32 both sides; measured worst: 2.4e-6 on the latents (values to 3), 1.6e-6 on the frames,
  // over the four runs (2026-12-06, AVX-512).
  for (size_t i = 0; i < steps.size(); ++i) {
    expect_close(steps[i], ref.f32(r.run + "_step" + std::to_string(i)), 2e-5f, 1e-5f,
                 "latents after step " + std::to_string(i));
  }
  EXPECT_EQ(video->frames, 9);
  EXPECT_EQ(video->width, r.size);
  expect_close(video->rgb, ref.f32(r.run + "_frames"), 2e-5f, 1e-5f, "frames");
}

TEST(WanPipeline, TextToVideoA14bTwoExperts) {
  run_and_compare({"t2v_a14b", "t2v", 32, false, 5.0, 4.0});
}

TEST(WanPipeline, Ti2v5bTextToVideo) {
  run_and_compare({"ti2v_5b", "t2v", 64, false, 5.0, -1});
}

TEST(WanPipeline, Ti2v5bImageToVideo) {
  run_and_compare({"ti2v_5b", "i2v", 64, true, 5.0, -1});
}

TEST(WanPipeline, ImageToVideoA14b) {
  run_and_compare({"i2v_a14b", "i2v", 32, true, 5.0, 3.0});
}

// What diffusers' VideoProcessor.preprocess makes of a 50x38 PNG for a 32x32 video: Pillow's
// Lanczos both ways, then [-1, 1]. 8-bit resampling is exact, so the floats are too.
TEST(WanPipeline, ImageInputResizedAsDiffusers) {
  testing::ReferenceTensors ref(kWan / "i2v_a14b" / "reference.safetensors");
  vision::ImageReadOptions opts;
  opts.alpha = vision::AlphaMode::kDrop;
  auto image = vision::read_image_file((kWan / "i2v_a14b" / "resize_input.png").string(), opts);
  ASSERT_TRUE(image.ok()) << image.status().to_string();
  ASSERT_EQ(image->width, 50);
  auto x = vision::vae_image_input(*image, 32, 32);
  ASSERT_TRUE(x.ok()) << x.status().to_string();
  expect_close(*x, ref.f32("resize_out"), 1e-7f, 0.0f, "preprocessed image");
}

// A copy of a fixture pipeline to break.
fs::path copy_pipeline(const std::string& fixture, const std::string& name) {
  const fs::path dst = fs::path(::testing::TempDir()) / ("wan_" + name);
  fs::remove_all(dst);
  fs::copy(kWan / fixture / "pipeline", dst, fs::copy_options::recursive);
  return dst;
}

std::string load_error(const fs::path& dir) {
  auto p = diffusion::WanPipeline::load(dir.string());
  return p.ok() ? std::string("loaded") : p.status().to_string();
}

TEST(WanPipeline, MissingComponentIsNamed) {
  const fs::path d = copy_pipeline("t2v_a14b", "no_vae");
  fs::remove_all(d / "vae");
  EXPECT_NE(load_error(d).find("vae"), std::string::npos) << load_error(d);
  const fs::path d2 = copy_pipeline("t2v_a14b", "no_text_encoder");
  fs::remove_all(d2 / "text_encoder");
  EXPECT_NE(load_error(d2).find("text_encoder"), std::string::npos) << load_error(d2);
}

TEST(WanPipeline, VaeChannelsMustMatchTheTransformer) {
  const fs::path d = copy_pipeline("t2v_a14b", "wrong_vae");
  fs::remove_all(d / "vae");
  fs::copy(kWan / "ti2v_5b" / "pipeline" / "vae", d / "vae", fs::copy_options::recursive);
  const std::string err = load_error(d);
  EXPECT_NE(err.find("z_dim 48"), std::string::npos) << err;
}

TEST(WanPipeline, NotAWanPipeline) {
  const std::string err = load_error(testing::kFluxPipeline);
  EXPECT_NE(err.find("FluxPipeline"), std::string::npos) << err;
}

TEST(WanPipeline, BadRequestsAreRefusedBeforeRunning) {
  testing::ReferenceTensors ref(kWan / "t2v_a14b" / "reference.safetensors");
  auto pipe = diffusion::WanPipeline::load((kWan / "t2v_a14b" / "pipeline").string());
  ASSERT_TRUE(pipe.ok()) << pipe.status().to_string();
  const diffusion::WanPipeline& p = **pipe;
  diffusion::WanRequest base = request(ref, {"t2v_a14b", "t2v", 32, false, 5.0, 4.0});
  ASSERT_TRUE(p.validate(base).ok()) << p.validate(base).to_string();
  auto expect = [&](diffusion::WanRequest req, const std::string& needle) {
    const Status s = p.validate(req);
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.to_string().find(needle), std::string::npos) << s.to_string();
  };
  diffusion::WanRequest r = base;
  r.width = 40;  // the VAE's 8x times patch 2: multiples of 16
  expect(r, "multiples of 16");
  r = base;
  r.num_frames = 0;
  expect(r, "num_frames 0");
  r.num_frames = 1000000;
  expect(r, "num_frames 1000000");
  r.num_frames = 10;
  expect(r, "4k + 1");
  r = base;
  r.noise.pop_back();
  expect(r, "noise holds");
  r = base;
  r.image.assign(3 * 32 * 32, 0.0f);
  expect(r, "takes no image");
  r = base;
  r.steps = 0;
  expect(r, "num_inference_steps 0");

  auto i2v = diffusion::WanPipeline::load((kWan / "i2v_a14b" / "pipeline").string());
  ASSERT_TRUE(i2v.ok()) << i2v.status().to_string();
  r = base;
  const Status s = (*i2v)->validate(r);
  EXPECT_NE(s.to_string().find("needs an image"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace qs
