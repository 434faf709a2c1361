// golden: `quantserve compare-images --task t2v` on the tiny Wan pipelines: T2V-A14B against
// itself is identical in every frame (PSNR null as the t2i path reports it, SSIM 1, latent
// cosine 1) and writes report.json and a strip per prompt; the tiny auto-round W4A16 expert
// pair (tiny_autoround_w4g32) and our own RTN W4A16 of the same source, each against the
// 16-bit source, differ a little (finite PSNR, SSIM below 1, cosine below 1 and above 0.9);
// a FLUX pipeline under --task t2v, a Wan one under t2i and two Wan models with different VAEs
// are errors. The frame metrics themselves on hand-made frames.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "core/json.h"
#include "diffusion/image_metrics.h"
#include "diffusion/png_image.h"
#include "flux_reference.h"
#include "wan_reference.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

const fs::path kQuantFixture = testing::kWanFixtures / "tiny_autoround_w4g32";

// 32x32, 9 frames (3 latent frames), 4 steps with CFG through both experts.
const char* const kSettings =
    " --task t2v --seed 3 --steps 4 --width 32 --height 32 --num-frames 9 --guidance-scale 5"
    " --guidance-scale-2 4 --max-sequence-length 16 --threads 2";

class WanCompareCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("qs_wan_compare_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    prompts_ = (dir_ / "prompts.txt").string();
    std::ofstream(prompts_) << "a photograph of an astronaut riding a horse\nA cat in a hat\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // t2v_a14b's pipeline with `experts`/transformer{,_2} in place of its own experts.
  static fs::path pipeline_with_experts(const std::string& name, const fs::path& experts) {
    const fs::path out = dir_ / name;
    fs::copy(testing::wan_pipeline("t2v_a14b"), out, fs::copy_options::recursive);
    for (const char* e : {"transformer", "transformer_2"}) {
      fs::remove_all(out / e);
      fs::copy(experts / e, out / e, fs::copy_options::recursive);
    }
    return out;
  }

  static nlohmann::json compare(const fs::path& reference, const fs::path& candidate,
                                const std::string& extra = "") {
    const auto r = run_cli("compare-images --reference " + reference.string() + " --candidate " +
                               candidate.string() + " --prompts " + prompts_ + kSettings + extra,
                           false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json();
  }

  static fs::path dir_;
  static std::string prompts_;
};

fs::path WanCompareCli::dir_;
std::string WanCompareCli::prompts_;

TEST_F(WanCompareCli, PipelineAgainstItselfIsIdentical) {
  const fs::path t2v = testing::wan_pipeline("t2v_a14b");
  const fs::path out = dir_ / "same";
  const nlohmann::json j = compare(t2v, t2v, " --out-dir " + out.string());
  ASSERT_EQ(j["per_prompt"].size(), 2u);
  EXPECT_EQ(j["task"], "t2v");
  EXPECT_EQ(j["settings"]["num_frames"], 9);
  EXPECT_EQ(j["settings"]["guidance_scale_2"], 4.0);
  for (const auto& p : j["per_prompt"]) {
    EXPECT_TRUE(p["identical"].get<bool>());
    for (const char* k : {"psnr_db", "psnr_db_mean", "psnr_db_min"}) EXPECT_TRUE(p[k].is_null());
    EXPECT_DOUBLE_EQ(p["ssim_mean"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(p["ssim_min"].get<double>(), 1.0);
    EXPECT_EQ(p["max_abs_error"].get<int>(), 0);
    EXPECT_DOUBLE_EQ(p["latent_cosine_similarity"].get<double>(), 1.0);
    ASSERT_EQ(p["per_frame"].size(), 9u);
    for (const auto& f : p["per_frame"]) {
      EXPECT_TRUE(f["psnr_db"].is_null());
      EXPECT_DOUBLE_EQ(f["ssim"].get<double>(), 1.0);
    }
  }
  EXPECT_TRUE(j["summary"]["min_psnr_db"].is_null());
  EXPECT_DOUBLE_EQ(j["summary"]["mean_ssim"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["summary"]["mean_latent_cosine_similarity"].get<double>(), 1.0);

  // report.json is the report printed; a strip per prompt of 8 of the 9 frames, the reference's
  // above the candidate's: 8 x 32 + 7 gutters wide, 2 x 32 + 1 gutter high.
  auto saved = read_json((out / "report.json").string());
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_EQ(*saved, j);
  EXPECT_EQ(j["strip_frames"], nlohmann::json({0, 1, 2, 3, 5, 6, 7, 8}));
  for (const char* name : {"strip_000.png", "strip_001.png"}) {
    int64_t w = 0, h = 0;
    std::vector<uint8_t> strip;
    ASSERT_TRUE(diffusion::read_png((out / name).string(), &w, &h, &strip).ok()) << name;
    EXPECT_EQ(w, 8 * 32 + 7 * 4);
    EXPECT_EQ(h, 2 * 32 + 4);
    // Identical videos: each top-row cell equals the one below it.
    for (int64_t y = 0; y < 32; ++y) {
      for (int64_t x = 0; x < w * 3; ++x) {
        ASSERT_EQ(strip[static_cast<size_t>(y * w * 3 + x)],
                  strip[static_cast<size_t>((y + 36) * w * 3 + x)]);
      }
    }
  }
}

// Image to video: both sides start from the same --image (prepared as generate-video prepares
// it); an I2V pipeline without one is refused before anything runs.
TEST_F(WanCompareCli, ImageToVideoTakesTheImage) {
  const fs::path i2v = testing::wan_pipeline("i2v_a14b");
  const std::string image = (i2v.parent_path() / "i2v_input.png").string();
  const nlohmann::json j = compare(i2v, i2v, " --image " + image);
  ASSERT_EQ(j["per_prompt"].size(), 2u);
  for (const auto& p : j["per_prompt"]) EXPECT_TRUE(p["identical"].get<bool>());
  const auto r = run_cli("compare-images --reference " + i2v.string() + " --candidate " +
                         i2v.string() + " --prompts " + prompts_ + kSettings);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("needs an image"), std::string::npos) << r.output;
}

// The tool's W4A16 (SignRound, int4 g32) and our RTN W4A16 of the same widened 16-bit experts,
// each against that 16-bit source: close, not equal.
TEST_F(WanCompareCli, W4A16ExpertsAgainstTheirSixteenBitSource) {
  // The widened experts read t2v_a14b's UMT5 output: their text_dim is its d_model.
  auto expert = read_json((kQuantFixture / "source/transformer/config.json").string());
  auto text = read_json(testing::wan_pipeline("t2v_a14b") + "/text_encoder/config.json");
  ASSERT_TRUE(expert.ok() && text.ok());
  ASSERT_EQ((*expert)["text_dim"], (*text)["d_model"]);

  const fs::path source = pipeline_with_experts("source", kQuantFixture / "source");
  const fs::path tool = pipeline_with_experts("tool_w4a16", kQuantFixture);
  const fs::path rtn = dir_ / "rtn_w4a16";
  const auto q = run_cli("quantize --model " + source.string() + " --output_dir " + rtn.string() +
                         " --iters 0 --disable_opt_rtn --bits 4 --group_size 32");
  ASSERT_EQ(q.exit_code, 0) << q.output;

  for (const fs::path& candidate : {tool, rtn}) {
    const nlohmann::json j = compare(source, candidate);
    ASSERT_EQ(j["per_prompt"].size(), 2u) << candidate;
    for (const auto& p : j["per_prompt"]) {
      EXPECT_FALSE(p["identical"].get<bool>()) << candidate;
      // Some frames of a 32x32 video may come out identical (their mean PSNR is then +inf):
      // the whole video's and the worst frame's are finite.
      for (const char* k : {"psnr_db", "psnr_db_min"}) {
        ASSERT_TRUE(p[k].is_number()) << candidate << " " << k;
        EXPECT_LT(p[k].get<double>(), 99.0) << candidate << " " << k;
        EXPECT_GT(p[k].get<double>(), 25.0) << candidate << " " << k;
      }
      EXPECT_LT(p["ssim_min"].get<double>(), 1.0) << candidate;
      EXPECT_LT(p["ssim_mean"].get<double>(), 1.0) << candidate;
      EXPECT_GT(p["ssim_min"].get<double>(), 0.5) << candidate;
      const double cos = p["latent_cosine_similarity"].get<double>();
      EXPECT_LT(cos, 1.0) << candidate;
      EXPECT_GT(cos, 0.9) << candidate;
      EXPECT_GT(p["max_abs_error"].get<int>(), 0) << candidate;
    }
  }
}

TEST_F(WanCompareCli, MismatchedPipelinesAndFlagsAreErrors) {
  const std::string t2v = testing::wan_pipeline("t2v_a14b");
  const std::string flux = testing::kFluxPipeline;
  auto r = run_cli("compare-images --reference " + t2v + " --candidate " + flux + " --prompts " +
                   prompts_ + kSettings);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("FluxPipeline"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("use --task t2i"), std::string::npos) << r.output;
  // The FLUX path refuses a Wan pipeline before loading it.
  r = run_cli("compare-images --reference " + flux + " --candidate " + t2v + " --prompts " +
              prompts_ + " --steps 1 --width 32 --height 32");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("use --task t2v"), std::string::npos) << r.output;
  // Two Wan models whose latents differ (Wan2.1's VAE against Wan2.2's 48-channel one).
  r = run_cli("compare-images --reference " + t2v + " --candidate " +
              testing::wan_pipeline("ti2v_5b") + " --prompts " + prompts_ + kSettings);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("different models"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("z_dim 48 scale_factor_spatial 16"), std::string::npos) << r.output;
  // Text to video against image to video (the same VAE): refused before anything runs.
  r = run_cli("compare-images --reference " + t2v + " --candidate " +
              testing::wan_pipeline("i2v_a14b") + " --prompts " + prompts_ + kSettings);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("WanImageToVideoPipeline"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("generated"), std::string::npos) << r.output;
  // A frame count the VAE cannot make.
  r = run_cli("compare-images --reference " + t2v + " --candidate " + t2v + " --prompts " +
              prompts_ + kSettings + " --num-frames 10");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("4k + 1"), std::string::npos) << r.output;
  // Usage errors: an unknown task, a video flag on the image task.
  EXPECT_EQ(run_cli("compare-images --reference a --candidate b --prompts p --task t2x").exit_code,
            2);
  EXPECT_EQ(
      run_cli("compare-images --reference a --candidate b --prompts p --num-frames 9").exit_code,
      2);
}

// compare_videos on hand-made frames: frame 1 of 3 off by 10 levels in one value.
TEST(VideoMetrics, PerFrameAndOverFrames) {
  const int64_t w = 12, h = 12, plane = w * h * 3;
  std::vector<uint8_t> a(static_cast<size_t>(3 * plane)), b;
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>((i * 37) % 200);
  b = a;
  b[static_cast<size_t>(plane + 5)] += 10;
  const diffusion::VideoComparison m = diffusion::compare_videos(a, b, 3, w, h);
  ASSERT_EQ(m.frames.size(), 3u);
  EXPECT_TRUE(std::isinf(m.frames[0].psnr_db));
  EXPECT_EQ(m.frames[1].max_abs_error, 10);
  // One frame: MSE 100 / 432; the video: 100 / 1296.
  EXPECT_NEAR(m.frames[1].psnr_db, 10 * std::log10(255.0 * 255.0 * plane / 100.0), 1e-9);
  EXPECT_NEAR(m.psnr_db, 10 * std::log10(255.0 * 255.0 * 3 * plane / 100.0), 1e-9);
  EXPECT_TRUE(std::isinf(m.psnr_db_mean));  // two identical frames
  EXPECT_DOUBLE_EQ(m.psnr_db_min, m.frames[1].psnr_db);
  EXPECT_LT(m.ssim_min, 1.0);
  EXPECT_DOUBLE_EQ(m.ssim_min, m.frames[1].ssim);
  EXPECT_NEAR(m.ssim_mean, (2.0 + m.frames[1].ssim) / 3.0, 1e-12);
  EXPECT_EQ(m.max_abs_error, 10);
  EXPECT_NEAR(m.mean_abs_error, 10.0 / (3 * plane), 1e-12);
}

TEST(VideoMetrics, StripFramesAndGrid) {
  EXPECT_EQ(diffusion::evenly_spaced_frames(81, 8),
            (std::vector<int64_t>{0, 11, 23, 34, 46, 57, 69, 80}));
  EXPECT_EQ(diffusion::evenly_spaced_frames(3, 8), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(diffusion::evenly_spaced_frames(121, 1), (std::vector<int64_t>{0}));
  // Two 2x1 frames per video, values = frame index + 10 * video: the strip's cells in order,
  // gutters and the short row white.
  const std::vector<uint8_t> ref = {10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11};
  const std::vector<uint8_t> cand = {20, 20, 20, 20, 20, 20, 21, 21, 21, 21, 21, 21};
  int64_t sw = 0, sh = 0;
  const auto strip = diffusion::video_strip(ref, cand, {1, 0}, 2, 1, &sw, &sh);
  EXPECT_EQ(sw, 2 * 2 + 4);
  EXPECT_EQ(sh, 2 * 1 + 4);
  auto at = [&](int64_t x, int64_t y) { return strip[static_cast<size_t>((y * sw + x) * 3)]; };
  EXPECT_EQ(at(0, 0), 11);  // reference frame 1, then frame 0
  EXPECT_EQ(at(6, 0), 10);
  EXPECT_EQ(at(2, 0), 255);  // gutter
  EXPECT_EQ(at(1, 5), 21);   // candidate row
  EXPECT_EQ(at(7, 5), 20);
  EXPECT_EQ(at(0, 2), 255);
  // side_by_side_grid is image_grid with [reference, candidate] rows.
  int64_t gw = 0, gh = 0, iw = 0, ih = 0;
  const auto grid = diffusion::side_by_side_grid({ref, ref}, {cand, cand}, 2, 2, &gw, &gh);
  const auto same =
      diffusion::image_grid({ref.data(), cand.data(), ref.data(), cand.data()}, 2, 2, 2, &iw, &ih);
  EXPECT_EQ(grid, same);
  EXPECT_EQ(gw, 8);
  EXPECT_EQ(gh, 8);
}

}  // namespace
}  // namespace qs
