// tests/dist: CFG parallelism of the tiny FLUX pipeline (the goldens' fixture) under
// `mpirun -np 2`: rank 0 runs the positive branch and decodes, rank 1 the negative one in
// run_cfg_worker(). Against one process's batch-2 forward of both branches: the same bits
// where both pick the same linear kernels (every output is then summed in one order, whatever
// the batch and the thread count), else within rounding, and diffusers' golden holds as it does
// for flux_pipeline_test. A cancelled request stops both ranks at the same step, and requests
// without true CFG run on rank 0 alone, with the pair still in step afterwards.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../golden/flux_reference.h"
#include "diffusion/flux_cfg_parallel.h"
#include "diffusion/flux_pipeline.h"
#include "diffusion/png_image.h"
#include "mpi_test_main.h"

namespace qs {
namespace {

using testing::expect_close;

class FluxCfgParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = testing::mpi_world();
    if (world_->size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
    auto single = diffusion::FluxPipeline::load(testing::kFluxPipeline);
    ASSERT_TRUE(single.ok()) << single.status().to_string();
    single_ = std::move(*single);
    auto pair = diffusion::FluxPipeline::load(testing::kFluxPipeline);
    ASSERT_TRUE(pair.ok()) << pair.status().to_string();
    pair_ = std::move(*pair);
    ASSERT_TRUE(pair_->set_cfg_parallel(world_).ok());
  }

  // Rank 1 serves rank 0's requests until rank 0 has run `on_rank0` and sent stop.
  template <typename F>
  void run_pair(F on_rank0) {
    if (world_->rank() == 1) {
      ThreadPool pool(1);
      const Status s = pair_->run_cfg_worker(pool);
      EXPECT_TRUE(s.ok()) << s.to_string();
      return;
    }
    on_rank0();
    const Status s = diffusion::send_cfg_stop(*world_);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }

  std::shared_ptr<dist::Communicator> world_;
  std::unique_ptr<diffusion::FluxPipeline> single_, pair_;
};

// reference.json's true-CFG run: 32x32 px, 4 steps, 32 text tokens.
diffusion::FluxRequest golden_request() {
  diffusion::FluxRequest req;
  req.prompt = "a photograph of an astronaut riding a horse";
  req.negative_prompt = "blurry, low quality, watermark";
  req.true_cfg_scale = 4.0;
  req.width = req.height = 32;
  req.steps = 4;
  req.guidance_scale = 3.5;
  req.max_sequence_length = 32;
  return req;
}

// Where every linear of a rank's batch-1 forward runs the kernel the batch-2 forward runs for
// twice its rows (ops::linear picks the GEMV below 65 rows on AVX-512, 48 on AVX2, the GEMM
// from there), the two sum in the same order: the same bits. 48x32 px is 96 image tokens, and
// 77 text tokens: every row count but the modulations' (1 and 2, both GEMV) is past both
// thresholds on either side. Noise drawn from the seed on both ranks.
diffusion::FluxRequest cfg_request() {
  diffusion::FluxRequest req = golden_request();
  req.width = 48, req.height = 32, req.max_sequence_length = 77;
  req.steps = 4, req.seed = 11, req.true_cfg_scale = 2.5;
  return req;
}

struct Denoised {
  std::vector<std::vector<float>> steps;
  Result<diffusion::FluxImage> image = Status(StatusCode::kInternal, "not run");
};

Denoised generate(const diffusion::FluxPipeline& pipe, diffusion::FluxRequest req, int threads) {
  Denoised run;
  ThreadPool pool(threads);
  req.on_step = [&](int64_t, int64_t, const std::vector<float>& x) { run.steps.push_back(x); };
  run.image = pipe.generate(req, pool);
  return run;
}

void expect_same_bits(const Denoised& got, const Denoised& want) {
  ASSERT_TRUE(got.image.ok()) << got.image.status().to_string();
  ASSERT_TRUE(want.image.ok()) << want.image.status().to_string();
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (size_t i = 0; i < got.steps.size(); ++i)
    EXPECT_EQ(got.steps[i], want.steps[i]) << "latents after step " << i;
  EXPECT_EQ(got.image->latents, want.image->latents);
  EXPECT_EQ(got.image->rgb, want.image->rgb);
}

TEST_F(FluxCfgParallel, SameBitsAsOneProcessWhereTheKernelsAgree) {
  run_pair([&] {
    const diffusion::FluxRequest req = cfg_request();
    const Denoised pair = generate(*pair_, req, 1);
    expect_same_bits(pair, generate(*single_, req, 1));
    expect_same_bits(pair, generate(*single_, req, 2));
    ASSERT_TRUE(pair.image.ok());
    EXPECT_EQ(pair.image->times.exchange_seconds.size(), 4u);
  });
}

// The golden's 32x32 px is 64 image tokens: the batch-2 forward runs its image linears on the
// GEMM (128 rows), each rank on the GEMV (64), so the last bits differ; diffusers' golden holds
// for the pair with flux_pipeline_test's tolerances.
TEST_F(FluxCfgParallel, DiffusersGoldenHolds) {
  run_pair([&] {
    testing::FluxReference ref;
    diffusion::FluxRequest req = golden_request();
    req.noise = ref.f32("cfg_noise");
    const Denoised pair = generate(*pair_, req, 1);
    const Denoised single = generate(*single_, req, 2);
    ASSERT_TRUE(pair.image.ok()) << pair.image.status().to_string();
    ASSERT_TRUE(single.image.ok()) << single.image.status().to_string();
    ASSERT_EQ(pair.steps.size(), 4u);
    ASSERT_EQ(single.steps.size(), 4u);
    for (size_t i = 0; i < pair.steps.size(); ++i) {
      expect_close(pair.steps[i], single.steps[i], 2e-6f, 1e-5f,
                   "cfg latents after step " + std::to_string(i) + ", pair vs one process");
      expect_close(pair.steps[i], ref.f32("cfg_step" + std::to_string(i)), 2e-5f, 1e-4f,
                   "cfg latents after step " + std::to_string(i) + ", pair vs diffusers");
    }
    expect_close(pair.image->rgb, single.image->rgb, 1e-6f, 1e-5f,
                 "cfg image, pair vs one process");
    expect_close(pair.image->rgb, ref.f32("cfg_image"), 1e-5f, 1e-4f,
                 "cfg image, pair vs diffusers");
    EXPECT_EQ(diffusion::to_rgb8(pair.image->rgb), diffusion::to_rgb8(single.image->rgb));
  });
}

TEST_F(FluxCfgParallel, CancelStopsBothRanksAtTheSameStep) {
  run_pair([&] {
    diffusion::FluxRequest req = cfg_request();
    int steps_seen = 0;
    req.cancelled = [&] { return ++steps_seen == 2; };
    ThreadPool pool(1);
    auto cancelled = pair_->generate(req, pool);
    ASSERT_FALSE(cancelled.ok());
    EXPECT_EQ(cancelled.status().message(), "cancelled after step 2/4");
    EXPECT_EQ(steps_seen, 2);
    // Had rank 1 run a step more, this request's exchanges would be out of step.
    req.cancelled = nullptr;
    expect_same_bits(generate(*pair_, req, 1), generate(*single_, req, 1));
  });
}

TEST_F(FluxCfgParallel, WithoutTrueCfgRank0RunsAlone) {
  run_pair([&] {
    diffusion::FluxRequest dev = cfg_request();
    dev.true_cfg_scale = 1.0;
    const Denoised alone = generate(*pair_, dev, 1);
    expect_same_bits(alone, generate(*single_, dev, 1));
    ASSERT_TRUE(alone.image.ok());
    EXPECT_TRUE(alone.image->times.exchange_seconds.empty());
    // A request rank 0 refuses is never sent: the pair is still in step.
    diffusion::FluxRequest bad = cfg_request();
    bad.width = 30;
    ThreadPool pool(1);
    EXPECT_FALSE(pair_->generate(bad, pool).ok());
    expect_same_bits(generate(*pair_, cfg_request(), 1), generate(*single_, cfg_request(), 1));
  });
}

TEST(FluxCfgJob, MessageRoundTrip) {
  diffusion::FluxRequest req = cfg_request();
  req.noise = {1.5f, -2.0f, 3.25f};
  req.seed = 1234567890123ull;
  const std::vector<uint8_t> bytes = diffusion::encode_cfg_job(req);
  auto back = diffusion::decode_cfg_job(bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->prompt, req.prompt);
  EXPECT_EQ(back->negative_prompt, req.negative_prompt);
  EXPECT_EQ(back->width, req.width);
  EXPECT_EQ(back->steps, req.steps);
  EXPECT_EQ(back->true_cfg_scale, req.true_cfg_scale);
  EXPECT_EQ(back->max_sequence_length, req.max_sequence_length);
  EXPECT_EQ(back->seed, req.seed);
  EXPECT_EQ(back->noise, req.noise);
  std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 1);
  EXPECT_FALSE(diffusion::decode_cfg_job(cut).ok());
  EXPECT_FALSE(diffusion::decode_cfg_job({'S'}).ok());
  EXPECT_TRUE(diffusion::is_cfg_stop({'S'}));
}

}  // namespace
}  // namespace qs
