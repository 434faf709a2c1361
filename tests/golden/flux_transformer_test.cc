// golden: FluxTransformer2DModel against diffusers on the tiny pipeline's transformer (one
// double- and one single-stream block, inner dim 32, guidance embedding): one forward at
// fixed random inputs, then the same inputs as a batch of two, which must give the same rows;
// bad configs and inputs are errors, not crashes.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/json.h"
#include "diffusion/flux_transformer.h"
#include "flux_reference.h"

namespace qs {
namespace {

using testing::expect_close;

using Inputs = testing::FluxReferenceInputs;

TEST(FluxTransformer, ForwardMatchesDiffusers) {
  testing::FluxReference ref;
  auto model = diffusion::FluxTransformer::load(testing::kFluxPipeline + "/transformer");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ThreadPool pool(2);
  Inputs in(ref, 1);
  std::vector<float> out(64 * 16);
  ASSERT_TRUE(model->forward(in.view(1), out.data(), pool).ok());
  // f32 on both sides; differences come from summation order (GEMM, softmax): ~1e-6.
  expect_close(out, ref.f32("xf_out"), 2e-5f, 1e-4f, "transformer output");
}

TEST(FluxTransformer, BatchOfTwoGivesTheSameRows) {
  testing::FluxReference ref;
  auto model = diffusion::FluxTransformer::load(testing::kFluxPipeline + "/transformer");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ThreadPool pool(2);
  Inputs one(ref, 1), two(ref, 2);
  // The second item differs (timestep), so a mix-up between the items would show.
  two.t[1] = 0.25f;
  std::vector<float> a(64 * 16), b(2 * 64 * 16), c(64 * 16);
  ASSERT_TRUE(model->forward(one.view(1), a.data(), pool).ok());
  ASSERT_TRUE(model->forward(two.view(2), b.data(), pool).ok());
  one.t[0] = 0.25f;
  ASSERT_TRUE(model->forward(one.view(1), c.data(), pool).ok());
  expect_close(std::vector<float>(b.begin(), b.begin() + 1024), a, 1e-6f, 1e-5f, "item 0");
  expect_close(std::vector<float>(b.begin() + 1024, b.end()), c, 1e-6f, 1e-5f, "item 1");
}

TEST(FluxTransformer, RejectsBadConfigsAndInputs) {
  namespace fs = std::filesystem;
  testing::FluxReference ref;
  auto model = diffusion::FluxTransformer::load(testing::kFluxPipeline + "/transformer");
  ASSERT_TRUE(model.ok());
  ThreadPool pool(1);
  Inputs in(ref, 1);
  auto no_guidance = in.view(1);
  no_guidance.guidance = nullptr;
  std::vector<float> out(64 * 16);
  EXPECT_FALSE(model->forward(no_guidance, out.data(), pool).ok());

  // A config whose shapes disagree with the weights names the tensor.
  const fs::path dir = fs::temp_directory_path() / "qs_flux_xf_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(testing::kFluxPipeline + "/transformer", dir, fs::copy_options::recursive);
  auto cfg = read_json((dir / "config.json").string());
  ASSERT_TRUE(cfg.ok());
  (*cfg)["joint_attention_dim"] = 48;
  ASSERT_TRUE(write_json((dir / "config.json").string(), *cfg).ok());
  auto bad = diffusion::FluxTransformer::load(dir.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("context_embedder.weight"), std::string::npos)
      << bad.status().message();
  (*cfg)["joint_attention_dim"] = 32;
  (*cfg)["axes_dims_rope"] = {4, 4, 4};
  ASSERT_TRUE(write_json((dir / "config.json").string(), *cfg).ok());
  bad = diffusion::FluxTransformer::load(dir.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("axes_dims_rope"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qs
