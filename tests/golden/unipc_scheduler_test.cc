// golden: UniPCMultistepScheduler (flow prediction, flow sigmas) against diffusers: the sigmas
// and timesteps of set_timesteps and the sample after every step of whole loops, for the
// configurations scripts/golden/gen_unipc_fixtures.py saved (Wan2.2's and the other orders and
// solver types); unsupported options and bad calls rejected with messages that name them.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "../common/reference_tensors.h"
#include "core/json.h"
#include "diffusion/unipc_scheduler.h"
#include "flux_reference.h"

namespace qs {
namespace {

using testing::expect_close;

const std::filesystem::path kFixtures =
    std::filesystem::path(QS_SOURCE_DIR) / "tests/golden/fixtures/unipc";

diffusion::UniPCConfig config_of(const std::string& name) {
  auto c = diffusion::read_unipc_config((kFixtures / name / "scheduler_config.json").string());
  QS_CHECK_MSG(c.ok(), c.status().to_string().c_str());
  return *c;
}

struct LoopCase {
  std::string name, config;
  int64_t steps;
};

std::vector<LoopCase> loop_cases() {
  auto info = read_json((kFixtures / "reference.json").string());
  QS_CHECK_MSG(info.ok(), info.status().to_string().c_str());
  std::vector<LoopCase> out;
  for (const auto& r : (*info)["runs"]) {
    out.push_back(
        {r["name"].get<std::string>(), r["config"].get<std::string>(), r["steps"].get<int64_t>()});
  }
  QS_CHECK(!out.empty());
  return out;
}

// The fixture's stand-in for a model: a[k] * sample + b[k] * noise in float32, as torch did.
void model(const testing::ReferenceTensors& ref, const std::string& run, int64_t k,
           const std::vector<float>& sample, std::vector<float>* out) {
  const float a = ref.f32(run + "_a")[k], b = ref.f32(run + "_b")[k];
  const std::vector<float> noise = ref.f32("noise");
  out->resize(sample.size());
  for (size_t e = 0; e < sample.size(); ++e) (*out)[e] = a * sample[e] + b * noise[e];
}

TEST(UniPCScheduler, ReadsWanConfig) {
  const diffusion::UniPCConfig c = config_of("wan_a14b");
  EXPECT_EQ(c.num_train_timesteps, 1000);
  EXPECT_EQ(c.solver_order, 2);
  EXPECT_EQ(c.flow_shift, 3.0);
  EXPECT_EQ(c.solver_type, diffusion::UniPCConfig::SolverType::kBh2);
  EXPECT_TRUE(c.lower_order_final);
  EXPECT_EQ(c.final_sigmas_type, diffusion::UniPCConfig::FinalSigma::kZero);
  EXPECT_EQ(config_of("order1_skip").disable_corrector, (std::vector<int64_t>{0, 2}));
}

TEST(UniPCScheduler, SigmasAndTimestepsMatchDiffusers) {
  const testing::ReferenceTensors ref(kFixtures / "reference.safetensors");
  for (const LoopCase& r : loop_cases()) {
    diffusion::UniPCScheduler s(config_of(r.config));
    ASSERT_TRUE(s.set_timesteps(r.steps).ok()) << r.name;
    // The same float64 operations as numpy, then one rounding to float32: equal bit for bit.
    EXPECT_EQ(s.sigmas(), ref.f32(r.name + "_sigmas")) << r.name;
    const Tensor& t = ref.at(r.name + "_timesteps");
    ASSERT_EQ(t.dtype, DType::kI64) << r.name;
    EXPECT_EQ(s.timesteps(), std::vector<int64_t>(t.ptr<int64_t>(), t.ptr<int64_t>() + t.numel()))
        << r.name;
  }
}

// What WanPipeline sees: the first timestep is 999 (sigma 1 - 1e-6 truncated), and with
// Wan2.2-T2V-A14B's boundary_ratio 0.875 the high-noise expert takes t >= 875.
TEST(UniPCScheduler, WanTimestepsAreTruncatedIntegers) {
  diffusion::UniPCScheduler s(config_of("wan_a14b"));
  ASSERT_TRUE(s.set_timesteps(40).ok());
  EXPECT_EQ(s.timesteps().front(), 999);
  EXPECT_FLOAT_EQ(s.sigmas().front(), 0.999999f);
  EXPECT_EQ(s.sigmas().back(), 0.0f);
  int64_t high = 0;
  for (int64_t t : s.timesteps()) high += static_cast<double>(t) >= 0.875 * 1000;
  EXPECT_EQ(high, 13);  // diffusers' timesteps: 999, 991, ..., 887, 875 (875.3), then 861
}

TEST(UniPCScheduler, EveryStepMatchesDiffusers) {
  const testing::ReferenceTensors ref(kFixtures / "reference.safetensors");
  for (const LoopCase& r : loop_cases()) {
    diffusion::UniPCScheduler s(config_of(r.config));
    ASSERT_TRUE(s.set_timesteps(r.steps).ok()) << r.name;
    std::vector<float> sample = ref.f32("sample0"), v;
    const std::vector<float> want = ref.f32(r.name + "_samples");
    const size_t n = sample.size();
    ASSERT_EQ(want.size(), n * static_cast<size_t>(r.steps)) << r.name;
    for (int64_t k = 0; k < r.steps; ++k) {
      ASSERT_EQ(s.step_index(), k);
      model(ref, r.name, k, sample, &v);
      ASSERT_TRUE(s.step(v.data(), sample.data(), static_cast<int64_t>(n)).ok()) << r.name;
      // float32 on both sides in the same order; torch's SLEEF log/expm1 and MKL's solve
      // differ from libm's and ours by an ulp here and there. Measured worst: 7.2e-7 on
      // values up to 3.4 (wan_a14b_40, shift5_40); order-1 and short runs are bit-equal.
      expect_close(sample, std::vector<float>(want.begin() + k * n, want.begin() + (k + 1) * n),
                   2e-6f, 2e-6f, r.name + " step " + std::to_string(k));
    }
  }
}

TEST(UniPCScheduler, SetTimestepsStartsAFreshLoop) {
  const testing::ReferenceTensors ref(kFixtures / "reference.safetensors");
  diffusion::UniPCScheduler s(config_of("order3_bh2"));
  std::vector<float> first, v;
  for (int loop = 0; loop < 2; ++loop) {
    ASSERT_TRUE(s.set_timesteps(10).ok());
    std::vector<float> sample = ref.f32("sample0");
    for (int64_t k = 0; k < 10; ++k) {
      model(ref, "order3_bh2_10", k, sample, &v);
      ASSERT_TRUE(s.step(v.data(), sample.data(), static_cast<int64_t>(sample.size())).ok());
    }
    if (loop == 0)
      first = sample;
    else
      EXPECT_EQ(sample, first);
  }
}

TEST(UniPCScheduler, RejectsBadCalls) {
  diffusion::UniPCScheduler s(config_of("wan_a14b"));
  std::vector<float> x(4, 1.0f), v(4, 0.5f);
  EXPECT_FALSE(s.step(v.data(), x.data(), 4).ok()) << "step before set_timesteps";
  for (int64_t steps : {0, -1}) {
    const Status st = s.set_timesteps(steps);
    EXPECT_FALSE(st.ok()) << steps;
    EXPECT_NE(st.message().find("steps"), std::string::npos) << st.message();
  }
  ASSERT_TRUE(s.set_timesteps(2).ok());
  EXPECT_FALSE(s.step(v.data(), x.data(), 0).ok());
  ASSERT_TRUE(s.step(v.data(), x.data(), 4).ok());
  EXPECT_FALSE(s.step(v.data(), x.data(), 3).ok()) << "the element count changed";
  ASSERT_TRUE(s.step(v.data(), x.data(), 4).ok());
  const Status past = s.step(v.data(), x.data(), 4);
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange) << past.to_string();
}

TEST(UniPCScheduler, RejectsOptionsItDoesNotImplement) {
  const auto dir = std::filesystem::temp_directory_path() / "qs_unipc_sched_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "scheduler_config.json").string();
  const std::string flow = R"("prediction_type": "flow_prediction", "use_flow_sigmas": true)";
  // Each body and the field its error must name.
  const std::pair<std::string, const char*> cases[] = {
      {"{}", "prediction_type"},  // diffusers' default is epsilon
      {R"({"prediction_type": "epsilon", "use_flow_sigmas": true})", "prediction_type"},
      {R"({"prediction_type": "v_prediction", "use_flow_sigmas": true})", "prediction_type"},
      {R"({"prediction_type": "flow_prediction"})", "use_flow_sigmas"},
      {"{" + flow + R"(, "use_karras_sigmas": true})", "use_karras_sigmas"},
      {"{" + flow + R"(, "use_beta_sigmas": true})", "use_beta_sigmas"},
      {"{" + flow + R"(, "thresholding": true})", "thresholding"},
      {"{" + flow + R"(, "use_dynamic_shifting": true})", "use_dynamic_shifting"},
      {"{" + flow + R"(, "predict_x0": false})", "predict_x0"},
      {"{" + flow + R"(, "shift_terminal": 0.1})", "shift_terminal"},
      {"{" + flow + R"(, "solver_p": {}})", "solver_p"},
      {"{" + flow + R"(, "solver_type": "bh3"})", "solver_type"},
      {"{" + flow + R"(, "solver_type": "bh1"})", "solver_type"},  // with the default "zero"
      {"{" + flow + R"(, "solver_order": 3, "lower_order_final": false})", "lower_order_final"},
      {"{" + flow + R"(, "solver_order": 0})", "solver_order"},
      {"{" + flow + R"(, "solver_order": 2.5})", "solver_order"},
      {"{" + flow + R"(, "flow_shift": -1.0})", "flow_shift"},
      {"{" + flow + R"(, "flow_shift": "5"})", "flow_shift"},
      {"{" + flow + R"(, "final_sigmas_type": "one"})", "final_sigmas_type"},
      {"{" + flow + R"(, "disable_corrector": 1})", "disable_corrector"},
      {"{" + flow + R"(, "disable_corrector": [0.5]})", "disable_corrector"},
      {"{" + flow + R"(, "timestep_spacing": "even"})", "timestep_spacing"},
      {"[1]", "JSON object"},
  };
  for (const auto& [body, field] : cases) {
    std::ofstream(path) << body;
    auto c = diffusion::read_unipc_config(path);
    ASSERT_FALSE(c.ok()) << body;
    EXPECT_NE(c.status().message().find(field), std::string::npos)
        << body << " -> " << c.status().message();
  }
  // The options it does take: bh1 with "sigma_min", and the older solver names as bh2.
  std::ofstream(path) << "{" + flow +
                             R"(, "solver_type": "midpoint", "final_sigmas_type": "sigma_min",
                             "shift_terminal": null, "disable_corrector": [1, 3]})";
  auto c = diffusion::read_unipc_config(path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->solver_type, diffusion::UniPCConfig::SolverType::kBh2);
  EXPECT_EQ(c->flow_shift, 1.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qs
