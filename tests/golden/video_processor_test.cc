// golden: video input against PyAV 18.1 (its own FFmpeg 8) and transformers 5.23's
// Qwen2VLVideoProcessor on torchvision, on the fixtures of scripts/golden/gen_video_fixtures.py
// (tests/golden/fixtures/video/README.md): decoded RGB frames (exact for the lossless clip, within
// a stated bound for H.264, whose YUV to RGB conversion differs between FFmpeg builds), sampled
// frame indices and grids exactly, torchvision's uint8 bicubic to the byte, pixel_values within
// 1e-6 (lossless) or the decode bound's image (H.264), second_per_grid_ts, and the audio track.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../common/golden_fixtures.h"
#include "core/json.h"
#include "vision/qwen2_vl_video_processor.h"
#include "vision/torch_resize.h"
#include "vision/video_file.h"
#include "vision/video_prompt.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kVideoFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/video";

// Debian's FFmpeg 5.1 against the FFmpeg 8 in PyAV's wheel: the H.264 clip's yuv420p frames
// convert to the same RGB bytes (measured 0 here, on AVX-512); swscale's SIMD yuv2rgb paths
// differ between CPUs and versions, so a level or two either way is allowed. The PNG clip,
// RGB already, must match exactly.
constexpr int kH264RgbTolerance = 2;

const json& reference() {
  static const json ref = [] {
    auto r = read_json((kVideoFixtures / "reference.json").string());
    QS_CHECK_MSG(r.ok(), r.status().to_string().c_str());
    return *r;
  }();
  return ref;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<uint8_t> u8_file(const fs::path& path) {
  const std::string s = file_bytes(path);
  return {s.begin(), s.end()};
}

int max_abs_diff(const uint8_t* a, const uint8_t* b, size_t n) {
  int worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(int{a[i]} - int{b[i]}));
  return worst;
}

TEST(VideoGolden, MetadataIsPyAVs) {
  for (const auto& [clip, entry] : reference()["clips"].items()) {
    auto info = vision::probe_video_bytes(file_bytes(kVideoFixtures / clip), clip);
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    EXPECT_EQ(info->n_frames, entry["frames"].get<int64_t>()) << clip;
    EXPECT_EQ(info->width, entry["width"].get<int64_t>()) << clip;
    EXPECT_EQ(info->height, entry["height"].get<int64_t>()) << clip;
    EXPECT_DOUBLE_EQ(info->fps, entry["average_rate"].get<double>()) << clip;
    EXPECT_DOUBLE_EQ(info->duration_seconds, entry["duration_s"].get<double>()) << clip;
    EXPECT_EQ(info->codec, entry["codec"].get<std::string>()) << clip;
    EXPECT_EQ(info->has_audio, entry["has_audio"].get<bool>()) << clip;
  }
}

// Every frame, in presentation order (the H.264 clip has B-frames), against PyAV's
// to_ndarray("rgb24").
TEST(VideoGolden, DecodedFramesArePyAVs) {
  for (const auto& [clip, entry] : reference()["clips"].items()) {
    auto video = vision::read_video_file((kVideoFixtures / clip).string());
    ASSERT_TRUE(video.ok()) << video.status().to_string();
    const std::vector<uint8_t> expected =
        u8_file(kVideoFixtures / (fs::path(clip).stem().string() + ".frames.u8"));
    ASSERT_EQ(video->pixels.size(), expected.size()) << clip;
    const int64_t n = entry["decoded_frames"].get<int64_t>();
    ASSERT_EQ(static_cast<int64_t>(video->indices.size()), n);
    const size_t frame_bytes = expected.size() / static_cast<size_t>(n);
    int worst = 0;
    for (int64_t f = 0; f < n; ++f) {
      const int d =
          max_abs_diff(&video->pixels[f * frame_bytes], &expected[f * frame_bytes], frame_bytes);
      worst = std::max(worst, d);
      // Timestamps from each frame's pts and the stream's time base.
      EXPECT_DOUBLE_EQ(video->seconds[f],
                       static_cast<double>(f) / entry["average_rate"].get<double>())
          << clip << " frame " << f;
    }
    const bool lossless = entry["codec"] == "png";
    std::printf("[ measured ] %s: max |RGB - PyAV's| = %d over %lld frames\n", clip.c_str(), worst,
                static_cast<long long>(n));
    EXPECT_LE(worst, lossless ? 0 : kH264RgbTolerance) << clip;
  }
}

// Qwen2VLVideoProcessor.sample_frames over 480 (frames, rate, fps or count, limits) cases.
TEST(VideoGolden, SampledIndicesAreTheProcessors) {
  auto cases = read_json((kVideoFixtures / "sampling.json").string());
  ASSERT_TRUE(cases.ok());
  int n_ok = 0, n_err = 0;
  for (const json& c : *cases) {
    vision::Qwen2VLVideoConfig config;
    config.do_sample_frames = true;
    if (c.contains("num_frames")) {
      config.num_frames = c["num_frames"].get<int64_t>();
    } else {
      config.fps = c["fps"].get<double>();
    }
    if (c.contains("min_frames")) config.min_frames = c["min_frames"].get<int64_t>();
    if (c.contains("max_frames")) config.max_frames = c["max_frames"].get<int64_t>();
    if (c.contains("temporal_patch_size")) {
      config.image.temporal_patch_size = c["temporal_patch_size"].get<int64_t>();
    }
    auto got = vision::qwen2_vl_sample_frames(c["total"].get<int64_t>(),
                                              c["video_fps"].get<double>(), config);
    if (c.contains("error")) {
      EXPECT_FALSE(got.ok()) << c.dump();
      ++n_err;
      continue;
    }
    ASSERT_TRUE(got.ok()) << c.dump() << ": " << got.status().to_string();
    EXPECT_EQ(*got, c["indices"].get<std::vector<int64_t>>()) << c.dump();
    ++n_ok;
  }
  EXPECT_GT(n_ok, 400);
  EXPECT_GT(n_err, 0);  // the 1-frame videos, which one temporal patch of two cannot take
}

TEST(VideoGolden, BicubicResizeIsTorchvisionsToTheByte) {
  auto index = read_json((kVideoFixtures / "resize.json").string());
  ASSERT_TRUE(index.ok());
  const std::vector<uint8_t> blob = u8_file(kVideoFixtures / "resize.bin");
  for (const json& c : *index) {
    const int64_t h = c["height"], w = c["width"], oh = c["out_height"], ow = c["out_width"];
    const auto in_at = c["input_offset"].get<size_t>(), out_at = c["output_offset"].get<size_t>();
    const std::vector<uint8_t> src(blob.begin() + in_at, blob.begin() + in_at + h * w * 3);
    const std::vector<uint8_t> expected(blob.begin() + out_at, blob.begin() + out_at + oh * ow * 3);
    EXPECT_EQ(vision::torch_resize_bicubic(src, w, h, 3, ow, oh), expected) << c.dump();
  }
}

// The whole path: the clip's bytes, the config as a checkpoint would state it, the fps the
// chat template asks for; indices, grid, seconds per temporal patch and pixel_values.
TEST(VideoGolden, PromptVideoIsTheProcessors) {
  for (const auto& [name, entry] : reference()["cases"].items()) {
    const std::string clip = entry["clip"];
    auto config = vision::parse_qwen2_vl_video_config(
        reference()["configs"][entry["config"].get<std::string>()], entry["config"]);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    config->cap_pixels_per_frame = entry["cap_pixels_per_frame"].get<bool>();
    vision::VideoPromptOptions options;
    options.fps.reset();
    if (!entry["fps"].is_null()) options.fps = entry["fps"].get<double>();
    auto video =
        vision::prepare_prompt_video(file_bytes(kVideoFixtures / clip), clip, *config, options);
    ASSERT_TRUE(video.ok()) << name << ": " << video.status().to_string();
    EXPECT_EQ(video->frame_indices, entry["indices"].get<std::vector<int64_t>>()) << name;
    const auto grid = entry["grid_thw"].get<std::vector<int64_t>>();
    EXPECT_EQ(video->grid.t, grid[0]) << name;
    EXPECT_EQ(video->grid.h, grid[1]) << name;
    EXPECT_EQ(video->grid.w, grid[2]) << name;
    EXPECT_DOUBLE_EQ(video->grid.seconds_per_t, entry["second_per_grid_ts"].get<double>()) << name;
    const int64_t rows = entry["shape"][0], dim = entry["shape"][1];
    ASSERT_EQ(static_cast<int64_t>(video->pixels->size()), rows * dim) << name;
    EXPECT_EQ(video->n_tokens, rows / 4) << name;
    const auto kept = entry["rows"].get<std::vector<int64_t>>();
    const std::vector<float> ref = testing::read_floats(
        kVideoFixtures / (name + ".pixel_values.f32"), 0, static_cast<int64_t>(kept.size()) * dim);
    double worst = 0.0, sum = 0.0, abs_sum = 0.0;
    for (size_t r = 0; r < kept.size(); ++r) {
      for (int64_t k = 0; k < dim; ++k) {
        worst = std::max(worst, std::abs(double{(*video->pixels)[kept[r] * dim + k]} -
                                         double{ref[r * dim + k]}));
      }
    }
    for (const float v : *video->pixels) {
      sum += v;
      abs_sum += std::abs(v);
    }
    const bool lossless = clip == "pattern_rgb.mov";
    std::printf("[ measured ] %s: max |pixel_values - transformers'| = %.3g, sum %.6f vs %.6f\n",
                name.c_str(), worst, sum, entry["sum"].get<double>());
    // One RGB level is 1/255/std (std about 0.27): 0.0146 in normalised units; the resize can
    // carry a level's difference to a few neighbours but not grow it.
    EXPECT_LE(worst, lossless ? 1e-6 : kH264RgbTolerance * 0.0146 + 1e-6) << name;
    const double rel = lossless ? 1e-7 : 1e-3;
    EXPECT_NEAR(abs_sum, entry["abs_sum"].get<double>(), rel * entry["abs_sum"].get<double>())
        << name;
  }
}

// The audio track at 16 kHz mono, against PyAV's AudioResampler (both libswresample).
TEST(VideoGolden, AudioTrackIsPyAVsResampled) {
  const auto& clip = reference()["clips"]["pattern_h264.mp4"];
  auto pcm = vision::read_video_audio_bytes(file_bytes(kVideoFixtures / "pattern_h264.mp4"),
                                            "pattern_h264.mp4");
  ASSERT_TRUE(pcm.ok()) << pcm.status().to_string();
  const auto n = clip["audio_16k_samples"].get<int64_t>();
  const std::vector<float> ref =
      testing::read_floats(kVideoFixtures / "pattern_h264.audio_16k.f32", 0, n);
  ASSERT_EQ(static_cast<int64_t>(pcm->size()), n);
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, double{std::abs((*pcm)[i] - ref[i])});
  std::printf("[ measured ] audio 16 kHz: max |ours - PyAV's| = %.3g over %lld samples\n", worst,
              static_cast<long long>(n));
  EXPECT_LE(worst, 1e-4);
}

}  // namespace
}  // namespace qs
