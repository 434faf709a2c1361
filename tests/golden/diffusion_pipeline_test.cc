// golden: diffusion::DiffusionPipeline, the one interface the commands, the servers and
// compare-images drive every pipeline family through (pipeline.h, pipeline_registry.h). On the
// tiny FLUX and Wan fixtures: the registry finds each family from model_index.json; a request
// in vLLM-Omni's terms gives the same latents and pixels as diffusers (the fixtures' goldens)
// and, bit for bit, as the family's own request type; unset fields become the diffusers
// defaults; a field a family does not take is refused by name; an unknown pipeline class is
// refused naming the ones that run.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "diffusion/flux_pipeline.h"
#include "diffusion/pipeline.h"
#include "diffusion/pipeline_registry.h"
#include "diffusion/wan_pipeline.h"
#include "flux_reference.h"
#include "wan_reference.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::expect_close;

std::unique_ptr<diffusion::DiffusionPipeline> load(const std::string& dir) {
  auto p = diffusion::load_pipeline(dir);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(DiffusionPipeline, RegistryFindsEachFamily) {
  struct Case {
    std::string dir, class_name, family;
    diffusion::PipelineOutput output;
  };
  for (const Case& c :
       {Case{testing::kFluxPipeline, "FluxPipeline", "flux", diffusion::PipelineOutput::kImage},
        Case{testing::wan_pipeline("t2v_a14b"), "WanPipeline", "wan",
             diffusion::PipelineOutput::kVideo},
        Case{testing::wan_pipeline("i2v_a14b"), "WanImageToVideoPipeline", "wan",
             diffusion::PipelineOutput::kVideo}}) {
    SCOPED_TRACE(c.dir);
    auto index = diffusion::read_pipeline_index(c.dir);
    ASSERT_TRUE(index.ok()) << index.status().to_string();
    EXPECT_EQ(index->family->key, c.family);
    auto pipe = load(c.dir);
    ASSERT_NE(pipe, nullptr);
    EXPECT_EQ(&pipe->family(), index->family);
    EXPECT_EQ(pipe->class_name(), c.class_name);
    EXPECT_EQ(pipe->output(), c.output);
    EXPECT_GT(pipe->resident_bytes(), 0u);
  }
  const auto* flux = diffusion::transformer_block_lists("FluxTransformer2DModel");
  ASSERT_NE(flux, nullptr);
  EXPECT_EQ(*flux, (std::vector<std::string>{"transformer_blocks", "single_transformer_blocks"}));
  const auto* wan = diffusion::transformer_block_lists("WanTransformer3DModel");
  ASSERT_NE(wan, nullptr);
  EXPECT_EQ(*wan, std::vector<std::string>{"blocks"});
  EXPECT_EQ(diffusion::transformer_block_lists("UNet2DConditionModel"), nullptr);
}

TEST(DiffusionPipeline, UnknownClassNamesTheOnesThatRun) {
  const fs::path dir = fs::temp_directory_path() / "qs_unknown_pipeline";
  fs::create_directories(dir);
  std::ofstream(dir / "model_index.json")
      << R"({"_class_name": "StableDiffusion3Pipeline", "vae": ["diffusers", "AutoencoderKL"]})";
  auto p = diffusion::load_pipeline(dir.string());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
  const std::string msg = p.status().message();
  for (const char* name :
       {"StableDiffusion3Pipeline", "FluxPipeline", "WanPipeline", "WanImageToVideoPipeline"}) {
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
  fs::remove_all(dir);
}

TEST(DiffusionPipeline, UnsetFieldsAreDiffusersDefaults) {
  auto flux = load(testing::kFluxPipeline);
  auto wan = load(testing::wan_pipeline("t2v_a14b"));
  ASSERT_NE(flux, nullptr);
  ASSERT_NE(wan, nullptr);
  const auto* fp = dynamic_cast<const diffusion::FluxPipeline*>(flux.get());
  ASSERT_NE(fp, nullptr);
  const diffusion::DiffusionRequest f = flux->resolve({});
  EXPECT_EQ(f.width, fp->default_size());
  EXPECT_EQ(f.height, fp->default_size());
  EXPECT_EQ(f.num_frames, 1);
  EXPECT_EQ(f.num_inference_steps, 28);
  EXPECT_EQ(f.guidance_scale, 3.5);
  EXPECT_EQ(f.true_cfg_scale, 1.0);
  EXPECT_EQ(f.max_sequence_length, 512);
  const diffusion::DiffusionRequest w = wan->resolve({});
  EXPECT_EQ(w.width, 832);
  EXPECT_EQ(w.height, 480);
  EXPECT_EQ(w.num_frames, 81);
  EXPECT_EQ(w.num_inference_steps, 50);
  EXPECT_EQ(w.guidance_scale, 5.0);
  EXPECT_FALSE(w.guidance_scale_2.has_value());  // the expert takes guidance_scale then
  EXPECT_EQ(w.max_sequence_length, 512);
  diffusion::DiffusionRequest given;
  given.width = 64, given.num_inference_steps = 3, given.guidance_scale = 1.0;
  const diffusion::DiffusionRequest kept = wan->resolve(given);
  EXPECT_EQ(kept.width, 64);
  EXPECT_EQ(kept.num_inference_steps, 3);
  EXPECT_EQ(kept.guidance_scale, 1.0);
  EXPECT_EQ(wan->latents_shape(kept).size(), 4u);
  EXPECT_EQ(flux->latents_dims(), (std::vector<std::string>{"n_img", "channels"}));
}

TEST(DiffusionPipeline, FieldsAFamilyDoesNotTakeAreRefusedByName) {
  auto flux = load(testing::kFluxPipeline);
  auto wan = load(testing::wan_pipeline("t2v_a14b"));
  auto i2v = load(testing::wan_pipeline("i2v_a14b"));
  ASSERT_NE(flux, nullptr);
  ASSERT_NE(wan, nullptr);
  ASSERT_NE(i2v, nullptr);
  diffusion::DiffusionRequest base;
  base.prompt = "a cat";
  base.width = base.height = 32;
  base.num_inference_steps = 2;
  base.max_sequence_length = 16;
  ASSERT_TRUE(flux->validate(flux->resolve(base)).ok());
  auto refused = [&](const diffusion::DiffusionPipeline& p, diffusion::DiffusionRequest r,
                     const std::string& field) {
    SCOPED_TRACE(field);
    const Status s = p.validate(p.resolve(std::move(r)));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  };
  diffusion::DiffusionRequest r = base;
  r.num_frames = 9;
  refused(*flux, r, "num_frames");
  r = base;
  r.image.assign(3 * 32 * 32, 0.0f);
  refused(*flux, r, "image");
  r = base;
  r.guidance_scale_2 = 2.0;
  refused(*flux, r, "guidance_scale_2");
  r = base;
  r.boundary_ratio = 0.5;
  refused(*flux, r, "boundary_ratio");
  r = base;
  r.flow_shift = 3.0;
  refused(*flux, r, "flow_shift");

  r = base;
  r.num_frames = 9;
  ASSERT_TRUE(wan->validate(wan->resolve(r)).ok());
  r.true_cfg_scale = 4.0;
  refused(*wan, r, "true_cfg_scale");
  EXPECT_FALSE(wan->requires_image());
  EXPECT_FALSE(wan->takes_image());
  EXPECT_TRUE(i2v->requires_image());
  r = base;
  r.num_frames = 9;
  refused(*i2v, r, "needs an image");
  EXPECT_EQ(flux->default_fps(), 0);
  EXPECT_EQ(wan->default_fps(), 16);
  EXPECT_FALSE(wan->supports_cfg_parallel());
  EXPECT_TRUE(flux->supports_cfg_parallel());
  EXPECT_EQ(wan->run_cfg_worker(*std::make_unique<ThreadPool>(1)).code(),
            StatusCode::kUnimplemented);
}

// The FLUX golden run (true CFG) through the interface: diffusers' latents and image, and the
// bits FluxPipeline's own request gives.
TEST(DiffusionPipeline, FluxThroughTheInterfaceMatchesDiffusers) {
  testing::FluxReference ref;
  auto pipe = load(testing::kFluxPipeline);
  ASSERT_NE(pipe, nullptr);
  ThreadPool pool(2);
  diffusion::DiffusionRequest req;
  req.prompt = "a photograph of an astronaut riding a horse";
  req.negative_prompt = "blurry, low quality, watermark";
  req.true_cfg_scale = 4.0;
  req.width = req.height = 32;
  req.num_inference_steps = 4;
  req.max_sequence_length = 32;
  req.latents = ref.f32("cfg_noise");
  std::vector<std::vector<float>> steps;
  req.on_step = [&](int64_t, int64_t, const std::vector<float>& x) { steps.push_back(x); };
  auto out = pipe->generate(req, pool);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(out->step_seconds.size(), 4u);
  EXPECT_EQ(out->frames, 1);
  for (size_t i = 0; i < steps.size(); ++i) {
    expect_close(steps[i], ref.f32("cfg_step" + std::to_string(i)), 2e-5f, 1e-4f,
                 "latents after step " + std::to_string(i));
  }
  expect_close(out->rgb, ref.f32("cfg_image"), 1e-5f, 1e-4f, "image");

  const auto& flux = dynamic_cast<const diffusion::FluxPipeline&>(*pipe);
  diffusion::FluxRequest own;
  own.prompt = req.prompt;
  own.negative_prompt = req.negative_prompt;
  own.true_cfg_scale = 4.0;
  own.width = own.height = 32;
  own.steps = 4;
  own.max_sequence_length = 32;
  own.noise = req.latents;
  auto theirs = flux.generate(own, pool);
  ASSERT_TRUE(theirs.ok()) << theirs.status().to_string();
  EXPECT_EQ(out->rgb, theirs->rgb);
  EXPECT_EQ(out->latents, theirs->latents);
}

// The two-expert T2V golden run through the interface, and an I2V one, bit for bit as
// WanPipeline's own request, and within the goldens' tolerance of diffusers.
TEST(DiffusionPipeline, WanThroughTheInterfaceMatchesDiffusers) {
  for (const auto& [fixture, run, guidance_2] :
       {std::tuple{"t2v_a14b", "t2v", 4.0}, std::tuple{"i2v_a14b", "i2v", 3.0}}) {
    SCOPED_TRACE(fixture);
    testing::WanReference ref(fixture);
    auto pipe = load(testing::wan_pipeline(fixture));
    ASSERT_NE(pipe, nullptr);
    ThreadPool pool(2);
    diffusion::DiffusionRequest req;
    req.prompt = "a photograph of an astronaut riding a horse";
    req.negative_prompt = "blurry, low quality, watermark";
    req.width = req.height = 32;
    req.num_frames = 9;
    req.num_inference_steps = 4;
    req.guidance_scale = 5.0;
    req.guidance_scale_2 = guidance_2;
    req.max_sequence_length = 16;
    req.latents = ref.f32(std::string(run) + "_noise");
    if (pipe->requires_image()) req.image = ref.f32(std::string(run) + "_image_in");
    auto out = pipe->generate(req, pool);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(out->frames, 9);
    EXPECT_EQ(out->step_seconds.size(), 4u);
    expect_close(out->rgb, ref.f32(std::string(run) + "_frames"), 2e-5f, 1e-5f, "frames");

    const auto& wan = dynamic_cast<const diffusion::WanPipeline&>(*pipe);
    diffusion::WanRequest own;
    own.prompt = req.prompt;
    own.negative_prompt = req.negative_prompt;
    own.width = own.height = 32;
    own.num_frames = 9;
    own.steps = 4;
    own.guidance_scale = 5.0;
    own.guidance_scale_2 = guidance_2;
    own.max_sequence_length = 16;
    own.noise = req.latents;
    own.image = req.image;
    auto theirs = wan.generate(own, pool);
    ASSERT_TRUE(theirs.ok()) << theirs.status().to_string();
    EXPECT_EQ(out->rgb, theirs->rgb);
    EXPECT_EQ(out->latents, theirs->latents);
    EXPECT_EQ(pipe->request_peak_bytes(req, 2), wan.request_peak_bytes(own, 2));
  }
}

// What a server checks against its budget grows with the request.
TEST(DiffusionPipeline, RequestPeakGrowsWithTheRequest) {
  for (const std::string& dir : {testing::kFluxPipeline, testing::wan_pipeline("ti2v_5b")}) {
    SCOPED_TRACE(dir);
    auto pipe = load(dir);
    ASSERT_NE(pipe, nullptr);
    diffusion::DiffusionRequest small;
    small.width = small.height = 64;
    small.max_sequence_length = 16;
    diffusion::DiffusionRequest big = small;
    big.width = big.height = 256;
    const size_t a = pipe->request_peak_bytes(pipe->resolve(small), 2);
    const size_t b = pipe->request_peak_bytes(pipe->resolve(big), 2);
    EXPECT_GT(a, 0u);
    EXPECT_GT(b, a);
  }
}

}  // namespace
}  // namespace qs
