// golden: WanTransformer3DModel against diffusers on the three tiny Wan2.2 pipelines (2 heads x
// 12, 2 layers, patch 1x2x2, a 3x4x4 latent grid = 12 tokens): T2V-A14B's and I2V-A14B's two
// experts at timestep 700, TI2V-5B with per-token timesteps (the first frame's tokens at 0);
// a CFG batch of two equals two single forwards; the tensor list equals the checkpoints';
// bad inputs, Wan2.1's image conditioning and a missing tensor are errors that name them.
#include <algorithm>
#include <filesystem>
#include <map>

#include <unistd.h>

#include <gtest/gtest.h>

#include "core/json.h"
#include "diffusion/wan_transformer.h"
#include "flux_reference.h"
#include "io/checkpoint.h"
#include "wan_reference.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::expect_close;
using testing::WanReference;
using Inputs = testing::WanReferenceInputs;

constexpr int64_t kTokens = 3 * 4 * 4;  // one latent grid's values per channel

diffusion::WanTransformer load(const std::string& dir) {
  auto model = diffusion::WanTransformer::load(dir);
  QS_CHECK_MSG(model.ok(), model.status().to_string().c_str());
  return std::move(*model);
}

struct GoldenCase {
  std::string fixture, component, want;  // want: the reference tensor
};

class WanTransformerGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(WanTransformerGolden, ForwardMatchesDiffusers) {
  const GoldenCase& c = GetParam();
  WanReference ref(c.fixture);
  const diffusion::WanTransformer model =
      load(testing::wan_pipeline(c.fixture) + "/" + c.component);
  Inputs in(ref);
  ThreadPool pool(2);
  std::vector<float> out(model.config().out_channels * kTokens);
  const Status s = model.forward(in.view(), out.data(), pool);
  ASSERT_TRUE(s.ok()) << s.to_string();
  // f32 on both sides; what differs is summation order (GEMM, softmax, norms) and libm's
  // exp/sin/cos against torch's. Measured max |err| on outputs up to 2.3, over QS_KERNEL=ref,
  // avx2 and avx512: 1.25e-6 (t2v_a14b transformer), 8.6e-7 (its transformer_2), 1.02e-6
  // (ti2v_5b), 1.01e-6 and 1.13e-6 (i2v_a14b's two): the bound is about 4x that.
  expect_close(out, ref.f32(c.want), 5e-6f, 1e-5f, c.fixture + " " + c.component);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WanTransformerGolden,
                         ::testing::Values(GoldenCase{"t2v_a14b", "transformer", "xf_out"},
                                           GoldenCase{"t2v_a14b", "transformer_2", "xf2_out"},
                                           GoldenCase{"ti2v_5b", "transformer", "xf_out"},
                                           GoldenCase{"i2v_a14b", "transformer", "xf_out"},
                                           GoldenCase{"i2v_a14b", "transformer_2", "xf2_out"}),
                         [](const ::testing::TestParamInfo<GoldenCase>& p) {
                           return p.param.fixture + "_" + p.param.component;
                         });

// TI2V's per-token timesteps: the golden above has two values (0, 700); here every token at
// 700 must give what one timestep of 700 for the item gives, and differ from the golden.
TEST(WanTransformer, UniformPerTokenTimestepsEqualOnePerItem) {
  WanReference ref("ti2v_5b");
  const diffusion::WanTransformer model = load(testing::wan_pipeline("ti2v_5b") + "/transformer");
  ThreadPool pool(2);
  Inputs in(ref);
  ASSERT_TRUE(in.per_token);
  ASSERT_EQ(in.timestep.size(), 12u);
  std::fill(in.timestep.begin(), in.timestep.end(), 700.0f);
  const int64_t n = model.config().out_channels * kTokens;
  std::vector<float> per_token(n), per_item(n);
  ASSERT_TRUE(model.forward(in.view(), per_token.data(), pool).ok());
  auto one = in.view();
  one.per_token_timestep = false;
  ASSERT_TRUE(model.forward(one, per_item.data(), pool).ok());
  expect_close(per_token, per_item, 0.0f, 0.0f, "per-token 700 vs per-item 700");
  float diff = 0;
  const std::vector<float> golden = ref.f32("xf_out");
  for (int64_t i = 0; i < n; ++i) diff = std::max(diff, std::fabs(per_token[i] - golden[i]));
  EXPECT_GT(diff, 1e-3f) << "the first frame's timestep 0 changed nothing";
}

// A CFG batch: item 0 the reference inputs, item 1 another text and timestep (and for TI2V
// other per-token timesteps). Each item must equal its own batch-1 forward.
void expect_batch_of_two_equals_singles(const std::string& fixture) {
  WanReference ref(fixture);
  const diffusion::WanTransformer model = load(testing::wan_pipeline(fixture) + "/transformer");
  ThreadPool pool(2);
  Inputs two(ref, 2), second(ref, 1);
  const size_t n_text = two.text.size() / 2, n_t = two.timestep.size() / 2;
  for (size_t i = 0; i < n_text; ++i) second.text[i] = two.text[n_text + i] = std::sin(0.37f * i);
  for (size_t i = 0; i < n_t; ++i) {
    second.timestep[i] = two.timestep[n_t + i] = (i % 3 == 0) ? 250.0f : 999.0f;
  }
  const int64_t n = model.config().out_channels * kTokens;
  std::vector<float> batch(2 * n), first_alone(n), second_alone(n);
  ASSERT_TRUE(model.forward(two.view(2), batch.data(), pool).ok());
  Inputs first(ref, 1);
  ASSERT_TRUE(model.forward(first.view(1), first_alone.data(), pool).ok());
  ASSERT_TRUE(model.forward(second.view(1), second_alone.data(), pool).ok());
  expect_close(std::vector<float>(batch.begin(), batch.begin() + n), first_alone, 1e-6f, 1e-5f,
               fixture + " item 0");
  expect_close(std::vector<float>(batch.begin() + n, batch.end()), second_alone, 1e-6f, 1e-5f,
               fixture + " item 1");
  float diff = 0;
  for (int64_t i = 0; i < n; ++i)
    diff = std::max(diff, std::fabs(first_alone[i] - second_alone[i]));
  EXPECT_GT(diff, 1e-3f) << "the two items should differ";
}

TEST(WanTransformer, BatchOfTwoEqualsTwoSingles) {
  expect_batch_of_two_equals_singles("t2v_a14b");
  expect_batch_of_two_equals_singles("ti2v_5b");
}

TEST(WanTransformer, TensorSpecsEqualTheCheckpoints) {
  for (const std::string dir : {"t2v_a14b/pipeline/transformer", "t2v_a14b/pipeline/transformer_2",
                                "ti2v_5b/pipeline/transformer", "i2v_a14b/pipeline/transformer",
                                "i2v_a14b/pipeline/transformer_2"}) {
    const std::string path = (testing::kWanFixtures / dir).string();
    auto c = models::Component::open(path);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto config = diffusion::read_wan_transformer_config(*c);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    std::map<std::string, std::vector<int64_t>> want, got;
    for (const std::string& name : c->checkpoint().names()) {
      want[name] = c->checkpoint().get(name).value().shape;
    }
    for (const auto& t : diffusion::wan_transformer_tensor_specs(*config)) {
      EXPECT_TRUE(got.emplace(t.name, t.shape).second) << "listed twice: " << t.name;
      EXPECT_EQ(t.linear, t.shape.size() == 2) << t.name;
    }
    EXPECT_EQ(got, want) << dir;
  }
}

TEST(WanTransformer, RejectsBadInputs) {
  WanReference ref("t2v_a14b");
  const diffusion::WanTransformer model = load(testing::wan_pipeline("t2v_a14b") + "/transformer");
  ThreadPool pool(1);
  Inputs in(ref);
  std::vector<float> out(16 * kTokens * 4);
  auto expect_error = [&](const diffusion::WanInputs& bad, const std::string& needle) {
    const Status s = model.forward(bad, out.data(), pool);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  auto odd = in.view();
  odd.height = 3;  // patch 2 over 3 rows
  expect_error(odd, "3x3x4 is not divisible by patch_size [1, 2, 2]");
  auto empty = in.view();
  empty.frames = 0;
  expect_error(empty, "0x4x4");
  auto no_batch = in.view();
  no_batch.batch = 0;
  expect_error(no_batch, "batch 0");
  auto no_text = in.view();
  no_text.n_text = 0;
  expect_error(no_text, "n_text 0");
  auto no_latents = in.view();
  no_latents.latents = nullptr;
  expect_error(no_latents, "missing input");
  auto too_long = in.view();
  too_long.width = 66;  // 33 patch columns, past rope_max_seq_len 32
  expect_error(too_long, "exceeds rope_max_seq_len 32");
}

// A copy of t2v_a14b's transformer in a temporary folder, for breaking it.
class WanTransformerCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qs_wan_xf_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(testing::wan_pipeline("t2v_a14b") + "/transformer", dir_, fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string config_path() const { return (dir_ / "config.json").string(); }
  fs::path dir_;
};

TEST_F(WanTransformerCopy, RefusesWan21ImageConditioning) {
  auto cfg = read_json(config_path());
  ASSERT_TRUE(cfg.ok());
  (*cfg)["image_dim"] = 1280;
  ASSERT_TRUE(write_json(config_path(), *cfg).ok());
  auto bad = diffusion::WanTransformer::load(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("image_dim is 1280"), std::string::npos)
      << bad.status().message();

  (*cfg)["image_dim"] = nullptr;
  (*cfg)["added_kv_proj_dim"] = 24;
  ASSERT_TRUE(write_json(config_path(), *cfg).ok());
  bad = diffusion::WanTransformer::load(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("added_kv_proj_dim"), std::string::npos)
      << bad.status().message();

  (*cfg)["added_kv_proj_dim"] = nullptr;
  (*cfg)["attention_head_dim"] = 13;
  ASSERT_TRUE(write_json(config_path(), *cfg).ok());
  bad = diffusion::WanTransformer::load(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("attention_head_dim 13"), std::string::npos)
      << bad.status().message();
}

TEST_F(WanTransformerCopy, NamesAMissingTensor) {
  const std::string missing = "blocks.1.attn2.norm_k.weight";
  const std::string file = (dir_ / "diffusion_pytorch_model.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> kept;
  {
    auto ckpt = io::Checkpoint::open(dir_.string(), "diffusion_pytorch_model");
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    for (const std::string& name : ckpt->names()) {
      if (name == missing) continue;
      // Owning copies: the file they view is about to be replaced.
      const Tensor t = ckpt->get(name).value();
      kept.emplace_back(name, Tensor::from_f32(t.dtype, t.shape, t.to_f32()));
    }
  }
  ASSERT_TRUE(io::write_safetensors(file, kept).ok());
  auto bad = diffusion::WanTransformer::load(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(missing), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace qs
