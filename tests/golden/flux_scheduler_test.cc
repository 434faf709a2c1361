// golden: FlowMatchEulerDiscrete with FLUX's dynamic shift against diffusers: the sigmas and
// timesteps of set_timesteps for several (steps, image tokens), read from the tiny pipeline's
// scheduler_config.json, and unsupported options rejected by name.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "diffusion/flow_match_scheduler.h"
#include "flux_reference.h"

namespace qs {
namespace {

using testing::expect_close;

TEST(FluxScheduler, SigmasAndTimestepsMatchDiffusers) {
  testing::FluxReference ref;
  auto config = diffusion::read_flow_match_config(testing::kFluxPipeline +
                                                  "/scheduler/scheduler_config.json");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_TRUE(config->use_dynamic_shifting);
  const std::pair<int64_t, int64_t> cases[] = {{4, 64}, {28, 4096}, {50, 1024}, {1, 256}};
  for (auto [steps, seq] : cases) {
    const std::string name = "sched_" + std::to_string(steps) + "_" + std::to_string(seq);
    auto s = diffusion::flux_schedule(*config, steps, diffusion::flux_mu(*config, seq));
    // float32 arithmetic on both sides, in a different order: a few ulps.
    expect_close(s.sigmas, ref.f32(name + "_sigmas"), 1e-6f, 1e-6f, name + " sigmas");
    expect_close(s.timesteps, ref.f32(name + "_timesteps"), 1e-4f, 1e-6f, name + " timesteps");
  }
}

TEST(FluxScheduler, EulerStepMovesAlongTheVelocity) {
  diffusion::FlowMatchSchedule s{{1.0f, 0.75f, 0.0f}, {1000.0f, 750.0f}};
  std::vector<float> x = {1.0f, -2.0f};
  const std::vector<float> v = {4.0f, 8.0f};
  diffusion::flow_match_step(s, 0, v.data(), 2, x.data());
  EXPECT_FLOAT_EQ(x[0], 0.0f);
  EXPECT_FLOAT_EQ(x[1], -4.0f);
}

TEST(FluxScheduler, RejectsOptionsItDoesNotImplement) {
  const auto dir = std::filesystem::temp_directory_path() / "qs_flux_sched_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "scheduler_config.json").string();
  for (const char* body : {R"({"use_karras_sigmas": true})", R"({"shift_terminal": 0.1})",
                           R"({"time_shift_type": "linear"})", R"({"shift": "3"})", "[1]"}) {
    std::ofstream(path) << body;
    auto c = diffusion::read_flow_match_config(path);
    EXPECT_FALSE(c.ok()) << body;
  }
  std::ofstream(path) << R"({"use_karras_sigmas": true})";
  EXPECT_NE(diffusion::read_flow_match_config(path).status().message().find("use_karras_sigmas"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qs
