// golden: `quantserve generate-video` end to end on the tiny Wan pipelines: given diffusers'
// initial noise (--noise), its PNG frames (--frames-dir) match diffusers' frames to within one
// level per channel, for T2V-A14B (two experts) and I2V-A14B (--image); the MP4 beside them
// decodes (through our own FFmpeg reader) to the same frames within the codec's loss; bad
// flags, images and sizes are errors that leave no output behind.
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "../common/cli.h"
#include "../common/reference_tensors.h"
#include "diffusion/png_image.h"
#include "io/checkpoint.h"
#include "vision/video_file.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

const fs::path kWan = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/wan";

class GenerateVideoCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qs_gen_video_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the fixture's `<run>_noise` [1, z, T, h, w] as a one-tensor safetensors file.
  std::string noise_file(const std::string& fixture, const std::string& run) {
    testing::ReferenceTensors ref(kWan / fixture / "reference.safetensors");
    const Tensor& want = ref.at(run + "_noise");
    const std::string path = (dir_ / (fixture + "_noise.safetensors")).string();
    Tensor t = Tensor::from_f32(DType::kF32, want.shape, ref.f32(run + "_noise"));
    EXPECT_TRUE(io::write_safetensors(path, {{"noise", t}}).ok());
    return path;
  }

  fs::path dir_;
};

const char* const kCommon =
    " --prompt 'a photograph of an astronaut riding a horse' --negative-prompt 'blurry, low "
    "quality, watermark' --width 32 --height 32 --num-frames 9 --steps 4 --guidance-scale 5"
    " --max-sequence-length 16 --threads 2";

// Largest per-channel difference between our PNG frames and diffusers' frames (rounded to 8
// bits as to_rgb8 rounds them), and the frames themselves.
int max_diff_to_reference(const fs::path& frames_dir, const std::string& fixture,
                          const std::string& run, std::vector<uint8_t>* ours_all) {
  testing::ReferenceTensors ref(kWan / fixture / "reference.safetensors");
  const std::vector<uint8_t> want = diffusion::to_rgb8(ref.f32(run + "_frames"));
  const size_t frame = 32 * 32 * 3;
  int d = 0;
  for (int f = 0; f < 9; ++f) {
    char name[32];
    std::snprintf(name, sizeof(name), "frame_%04d.png", f);
    int64_t w = 0, h = 0;
    std::vector<uint8_t> px;
    EXPECT_TRUE(diffusion::read_png((frames_dir / name).string(), &w, &h, &px).ok()) << name;
    if (w != 32 || h != 32 || px.size() != frame) return 256;
    for (size_t i = 0; i < frame; ++i) d = std::max(d, std::abs(px[i] - want[f * frame + i]));
    ours_all->insert(ours_all->end(), px.begin(), px.end());
  }
  return d;
}

double psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) se += (a[i] - b[i]) * (a[i] - b[i]);
  const double mse = se / static_cast<double>(a.size());
  return mse == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 / mse);
}

TEST_F(GenerateVideoCli, TextAndImageToVideoMatchDiffusers) {
  struct Case {
    std::string fixture, run, extra;
  };
  for (const Case& c :
       {Case{"t2v_a14b", "t2v", " --guidance-scale-2 4"},
        Case{"i2v_a14b", "i2v",
             " --guidance-scale-2 3 --image " + (kWan / "i2v_a14b" / "i2v_input.png").string()}}) {
    SCOPED_TRACE(c.fixture);
    const fs::path frames = dir_ / (c.fixture + "_frames");
    const std::string mp4 = (dir_ / (c.fixture + ".mp4")).string();
    auto r = run_cli("generate-video --model " + (kWan / c.fixture / "pipeline").string() +
                     kCommon + c.extra + " --noise " + noise_file(c.fixture, c.run) +
                     " --frames-dir " + frames.string() + " --out " + mp4 + " --fps 16");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("9 frames, 4 steps"), std::string::npos) << r.output;
    std::vector<uint8_t> ours;
    EXPECT_LE(max_diff_to_reference(frames, c.fixture, c.run, &ours), 1);

    // The MP4 holds the same 9 frames at 16 fps, within H.264's loss at crf 18 on 32x32
    // frames of noise-like content (measured 2026-12-06: 35.2 dB for both runs).
    auto video = vision::read_video_file(mp4);
    ASSERT_TRUE(video.ok()) << video.status().to_string();
    EXPECT_EQ(video->info.n_frames, 9);
    EXPECT_EQ(video->info.width, 32);
    EXPECT_DOUBLE_EQ(video->info.fps, 16.0);
    EXPECT_EQ(video->info.codec, "h264");
    ASSERT_EQ(video->pixels.size(), ours.size());
    EXPECT_GE(psnr(video->pixels, ours), 32.0);
  }
}

TEST_F(GenerateVideoCli, SameSeedSameVideo) {
  const std::string model = " --model " + (kWan / "t2v_a14b" / "pipeline").string();
  const fs::path a = dir_ / "a", b = dir_ / "b";
  ASSERT_EQ(run_cli("generate-video" + model + kCommon + " --seed 7 --frames-dir " + a.string())
                .exit_code,
            0);
  ASSERT_EQ(run_cli("generate-video" + model + kCommon + " --seed 7 --frames-dir " + b.string())
                .exit_code,
            0);
  for (const char* f : {"frame_0000.png", "frame_0008.png"}) {
    EXPECT_EQ(testing::slurp((a / f).string()), testing::slurp((b / f).string())) << f;
  }
}

TEST_F(GenerateVideoCli, BadInputIsAnErrorAndWritesNothing) {
  const std::string t2v = " --model " + (kWan / "t2v_a14b" / "pipeline").string();
  const std::string i2v = " --model " + (kWan / "i2v_a14b" / "pipeline").string();
  const std::string out = (dir_ / "x.mp4").string();
  const std::string corrupt = (dir_ / "corrupt.png").string();
  {
    std::FILE* f = std::fopen(corrupt.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("\x89PNG\r\n\x1a\n not really", f);
    std::fclose(f);
  }
  struct Case {
    std::string args, needle;
  };
  const std::string base = " --prompt p --steps 1 --max-sequence-length 16 --out " + out;
  // Noise of the wrong rank, and of the right rank but the wrong grid.
  const std::string flat = (dir_ / "flat.safetensors").string();
  ASSERT_TRUE(
      io::write_safetensors(flat, {{"noise", Tensor::from_f32(DType::kF32, {16, 48},
                                                              std::vector<float>(16 * 48, 0.0f))}})
          .ok());
  const std::string small = (dir_ / "small.safetensors").string();
  ASSERT_TRUE(
      io::write_safetensors(small, {{"noise", Tensor::from_f32(DType::kF32, {16, 3, 2, 2},
                                                               std::vector<float>(16 * 12, 0.0f))}})
          .ok());
  for (const Case& c : {
           Case{t2v + base + " --width 40 --height 32 --num-frames 9", "multiples of 16"},
           Case{t2v + base + " --width 32 --height 32 --num-frames 0", "num_frames 0"},
           Case{t2v + base + " --width 32 --height 32 --num-frames 1000000", "num_frames 1000000"},
           Case{t2v + base + " --width 32 --height 32 --num-frames 10", "4k + 1"},
           Case{i2v + base + " --width 32 --height 32 --num-frames 9", "needs an image"},
           Case{i2v + base + " --width 32 --height 32 --num-frames 9 --image " + corrupt,
                "corrupt.png"},
           Case{i2v + base + " --width 32 --height 32 --num-frames 9 --image /nonexistent.png",
                "nonexistent.png"},
           Case{t2v + base + " --width 32 --height 32 --num-frames 9 --fps 0", "--fps"},
           Case{" --model " + dir_.string() + base, "model_index.json"},
           Case{t2v + base + " --width 32 --height 32 --num-frames 9 --noise " + flat,
                "[z, frames, h, w]"},
           Case{t2v + base + " --width 32 --height 32 --num-frames 9 --noise " + small,
                "noise holds 192 values"},
       }) {
    SCOPED_TRACE(c.args);
    auto r = run_cli("generate-video" + c.args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out));
  }
}

}  // namespace
}  // namespace qs
