// golden: `quantserve generate-image` end to end on the tiny FLUX pipeline: given diffusers'
// initial noise (--noise), its PNG matches diffusers' to within one level per channel, for
// dev guidance and for true CFG; bad flags and files are errors that leave no output behind.
#include <filesystem>

#include <gtest/gtest.h>

#include "../common/cli.h"
#include "diffusion/png_image.h"
#include "flux_reference.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

class GenerateImageCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qs_gen_image_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes reference `<run>_noise` as a one-tensor safetensors file.
  std::string noise_file(const std::string& run) {
    testing::FluxReference ref;
    const std::string path = (dir_ / (run + "_noise.safetensors")).string();
    Tensor t = Tensor::from_f32(DType::kF32, {1, 64, 16}, ref.f32(run + "_noise"));
    EXPECT_TRUE(io::write_safetensors(path, {{"noise", t}}).ok());
    return path;
  }

  int max_diff_to_reference(const std::string& png, const std::string& run) {
    int64_t w = 0, h = 0, w2 = 0, h2 = 0;
    std::vector<uint8_t> ours, theirs;
    EXPECT_TRUE(diffusion::read_png(png, &w, &h, &ours).ok()) << png;
    EXPECT_TRUE(
        diffusion::read_png((testing::kFluxFixtures / (run + ".png")).string(), &w2, &h2, &theirs)
            .ok());
    EXPECT_EQ(w, w2);
    EXPECT_EQ(h, h2);
    if (ours.size() != theirs.size()) return 256;
    int d = 0;
    for (size_t i = 0; i < ours.size(); ++i) d = std::max(d, std::abs(ours[i] - theirs[i]));
    return d;
  }

  fs::path dir_;
};

const char* const kCommon =
    " --prompt 'a photograph of an astronaut riding a horse' --width 32 --height 32 --steps 4"
    " --guidance-scale 3.5 --max-sequence-length 32 --threads 2";

TEST_F(GenerateImageCli, DevAndTrueCfgMatchDiffusers) {
  const std::string model = " --model " + testing::kFluxPipeline;
  const std::string dev = (dir_ / "dev.png").string(), cfg = (dir_ / "cfg.png").string();
  auto r = run_cli("generate-image" + model + kCommon + " --noise " + noise_file("dev") +
                   " --out " + dev);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 steps"), std::string::npos) << r.output;
  EXPECT_LE(max_diff_to_reference(dev, "dev"), 1);
  r = run_cli("generate-image" + model + kCommon +
              " --negative-prompt 'blurry, low quality, watermark' --true-cfg-scale 4 --noise " +
              noise_file("cfg") + " --out " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LE(max_diff_to_reference(cfg, "cfg"), 1);
  // Without --noise the seed draws the noise: same seed, same image.
  const std::string a = (dir_ / "a.png").string(), b = (dir_ / "b.png").string();
  ASSERT_EQ(run_cli("generate-image" + model + kCommon + " --seed 7 --out " + a).exit_code, 0);
  ASSERT_EQ(run_cli("generate-image" + model + kCommon + " --seed 7 --out " + b).exit_code, 0);
  EXPECT_EQ(testing::slurp(a), testing::slurp(b));
}

TEST_F(GenerateImageCli, BadInputIsAnErrorAndWritesNothing) {
  const std::string model = " --model " + testing::kFluxPipeline;
  const std::string out = (dir_ / "x.png").string();
  auto r = run_cli("generate-image" + model +
                   " --prompt x --width 30 --height 32 --steps 1"
                   " --max-sequence-length 32 --out " +
                   out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("multiples of 4"), std::string::npos) << r.output;
  r = run_cli("generate-image" + model + " --prompt x --steps two --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_cli("generate-image --model " + (dir_ / "missing").string() + " --prompt x --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = run_cli("generate-image" + model + std::string(kCommon) + " --noise " +
              (testing::kFluxPipeline + "/model_index.json") + " --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace qs
