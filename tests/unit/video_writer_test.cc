// unit: the MP4 writer (vision/video_writer.h) against the project's own reader: a synthetic
// clip comes back with its frame count, size, rate and codec, and close to its pixels (which
// needs writer and reader to agree on the colour matrix); the moov box comes before the media
// data; FFmpeg's own tools find nothing to warn about; bad requests get precise errors; PNG
// frames read back exactly.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "diffusion/png_image.h"
#include "vision/video_file.h"
#include "vision/video_writer.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kFrames = 17, kHeight = 48, kWidth = 64;
// Per-frame PSNR of the decoded clip against the input (see ClipReadsBackThroughOwnReader).
constexpr double kMinPsnrDb = 32.0;

// [n, h, w, 3]: colour gradients drifting with time and a saturated red 16x16 square moving
// right and down, its edges ramped over 6 pixels. Saturated colour is where a BT.601 / BT.709
// mix-up shows most; soft edges keep yuv420p's halved chroma from hiding it (hard red edges
// alone cost up to 9 dB, more than the mix-up).
std::vector<uint8_t> synthetic_clip(int64_t n, int64_t h, int64_t w) {
  std::vector<uint8_t> rgb(static_cast<size_t>(n * h * w * 3));
  const double pi = std::acos(-1.0);
  const double red[3] = {230, 30, 40};
  for (int64_t t = 0; t < n; ++t) {
    const double cx = 11.5 + 2.0 * double(t), cy = 15.5 + double(t);  // the square's centre
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const double fx = double(x) / double(w), fy = double(y) / double(h);
        const double ft = double(t) / double(n);
        const double px[3] = {128 + 100 * std::sin(pi * fx + 2 * pi * ft),
                              128 + 100 * std::cos(pi * fy - pi * ft), 40 + 170 * (fx + fy) / 2};
        // 1 inside the square's 4x4 core, 0 from 8 pixels out, smoothstep between.
        const double d = std::max(std::fabs(double(x) - cx), std::fabs(double(y) - cy)) - 8;
        double a = std::clamp(-d / 6, 0.0, 1.0);
        a = a * a * (3 - 2 * a);
        uint8_t* p = &rgb[static_cast<size_t>(((t * h + y) * w + x) * 3)];
        for (int c = 0; c < 3; ++c)
          p[c] = static_cast<uint8_t>(std::lround(a * red[c] + (1 - a) * px[c]));
      }
    }
  }
  return rgb;
}

double psnr(const uint8_t* a, const uint8_t* b, size_t n) {
  double se = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    se += d * d;
  }
  if (se == 0) return 99.0;
  return 10 * std::log10(255.0 * 255.0 / (se / double(n)));
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A fresh directory under the system's temporary one, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("qs_video_writer_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// stdout and stderr of a shell command, and its exit status.
std::string run(const std::string& command, int* status) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

bool on_path(const std::string& tool) {
  int status = 0;
  run("command -v " + tool + " >/dev/null", &status);
  return status == 0;
}

TEST(VideoWriter, ClipReadsBackThroughOwnReader) {
  const std::vector<uint8_t> rgb = synthetic_clip(kFrames, kHeight, kWidth);
  auto mp4 = vision::encode_mp4(rgb.data(), kFrames, kHeight, kWidth, {});
  ASSERT_TRUE(mp4.ok()) << mp4.status().to_string();
  auto back = vision::read_video_bytes(*mp4, "clip.mp4");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->info.n_frames, kFrames);
  EXPECT_EQ(back->info.width, kWidth);
  EXPECT_EQ(back->info.height, kHeight);
  EXPECT_DOUBLE_EQ(back->info.fps, 16.0);
  EXPECT_DOUBLE_EQ(back->info.duration_seconds, 17.0 / 16.0);
  EXPECT_EQ(back->info.codec, "h264");
  EXPECT_FALSE(back->info.has_audio);
  ASSERT_EQ(back->pixels.size(), rgb.size());
  const size_t frame_bytes = static_cast<size_t>(kHeight * kWidth * 3);
  // Measured with Debian 12's FFmpeg 5.1 and libx264 r3095 at crf 18: 33.6 to 37.2 dB per frame
  // (yuv420p alone, without the encoder, allows 34.0 to 39.3). With the matrices disagreeing
  // it was 26.2 to 28.6 dB (BT.709 written untagged, so read as BT.601) and 25.7 to 29.4 dB
  // (BT.601 written, tagged BT.709): the bound sits between.
  for (int64_t t = 0; t < kFrames; ++t) {
    const size_t at = static_cast<size_t>(t) * frame_bytes;
    EXPECT_GE(psnr(&rgb[at], &back->pixels[at], frame_bytes), kMinPsnrDb) << "frame " << t;
    EXPECT_NEAR(back->seconds[static_cast<size_t>(t)], double(t) / 16.0, 1e-9) << "frame " << t;
  }
}

// The same frames give the same bytes, call after call in one process (the encoder once read
// uninitialised row padding, and the bytes drifted from call to call), at one encoder thread
// and at libx264's own choice.
TEST(VideoWriter, SameFramesSameBytes) {
  const std::vector<uint8_t> rgb = synthetic_clip(kFrames, kHeight, kWidth);
  for (int threads : {1, 0}) {
    vision::VideoWriteOptions o;
    o.threads = threads;
    auto first = vision::encode_mp4(rgb.data(), kFrames, kHeight, kWidth, o);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    for (int i = 0; i < 6; ++i) {
      auto again = vision::encode_mp4(rgb.data(), kFrames, kHeight, kWidth, o);
      ASSERT_TRUE(again.ok()) << again.status().to_string();
      EXPECT_EQ(*again, *first) << "call " << i + 2 << ", threads " << threads;
    }
  }
}

TEST(VideoWriter, FrameRateIsTheTimeBase) {
  const std::vector<uint8_t> rgb = synthetic_clip(5, 16, 16);
  for (int fps : {1, 24, 30, 60, 240}) {
    vision::VideoWriteOptions options;
    options.fps = fps;
    options.preset = "ultrafast";
    auto mp4 = vision::encode_mp4(rgb.data(), 5, 16, 16, options);
    ASSERT_TRUE(mp4.ok()) << mp4.status().to_string();
    auto info = vision::probe_video_bytes(*mp4, "clip.mp4");
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    EXPECT_DOUBLE_EQ(info->fps, fps);
    EXPECT_EQ(info->n_frames, 5);
    EXPECT_DOUBLE_EQ(info->duration_seconds, 5.0 / fps);
  }
}

// Top-level boxes of an ISO BMFF file in order; fails the test on a box that does not fit.
std::vector<std::string> top_level_boxes(const std::string& bytes) {
  std::vector<std::string> types;
  auto be = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[at + size_t(i)]);
    return v;
  };
  size_t pos = 0;
  while (pos < bytes.size()) {
    EXPECT_LE(pos + 8, bytes.size()) << "a box header runs past the end at " << pos;
    if (pos + 8 > bytes.size()) break;
    uint64_t size = be(pos, 4);
    types.push_back(bytes.substr(pos + 4, 4));
    if (size == 1) size = be(pos + 8, 8);      // 64-bit largesize
    if (size == 0) size = bytes.size() - pos;  // to the end of the file
    EXPECT_GE(size, 8u) << types.back() << " at " << pos;
    EXPECT_LE(size, bytes.size() - pos) << types.back() << " at " << pos << " runs past the end";
    if (size < 8 || size > bytes.size() - pos) break;
    pos += size;
  }
  return types;
}

TEST(VideoWriter, MoovPrecedesMdat) {
  const std::vector<uint8_t> rgb = synthetic_clip(kFrames, kHeight, kWidth);
  auto mp4 = vision::encode_mp4(rgb.data(), kFrames, kHeight, kWidth, {});
  ASSERT_TRUE(mp4.ok()) << mp4.status().to_string();
  const std::vector<std::string> boxes = top_level_boxes(*mp4);
  ASSERT_FALSE(boxes.empty());
  EXPECT_EQ(boxes.front(), "ftyp");
  const auto moov = std::find(boxes.begin(), boxes.end(), "moov");
  const auto mdat = std::find(boxes.begin(), boxes.end(), "mdat");
  ASSERT_NE(moov, boxes.end());
  ASSERT_NE(mdat, boxes.end());
  EXPECT_LT(moov - boxes.begin(), mdat - boxes.begin()) << "moov after mdat: no faststart";
}

TEST(VideoWriter, FfmpegToolsFindNothingToWarnAbout) {
  if (!on_path("ffprobe") || !on_path("ffmpeg")) {
    GTEST_SKIP() << "ffprobe/ffmpeg not on PATH (Debian package ffmpeg, installed by "
                    "scripts/setup.sh): the MP4 is not checked by FFmpeg's own tools";
  }
  TempDir dir;
  const std::string path = (dir.path() / "clip.mp4").string();
  const std::vector<uint8_t> rgb = synthetic_clip(kFrames, kHeight, kWidth);
  ASSERT_TRUE(vision::write_mp4(path, rgb.data(), kFrames, kHeight, kWidth).ok());
  int status = 0;
  EXPECT_EQ(run("ffprobe -v warning '" + path + "'", &status), "");
  EXPECT_EQ(status, 0);
  EXPECT_EQ(run("ffmpeg -nostdin -v warning -i '" + path + "' -f null -", &status), "");
  EXPECT_EQ(status, 0);
  // The stream says what it holds: the players' matrix is the writer's.
  const std::string fields =
      run("ffprobe -v error -select_streams v:0 -show_entries stream=codec_name,profile,pix_fmt,"
          "color_range,color_space,color_transfer,color_primaries,r_frame_rate,nb_frames "
          "-of default=noprint_wrappers=1 '" +
              path + "'",
          &status);
  EXPECT_EQ(status, 0);
  for (const char* want : {"codec_name=h264\n", "pix_fmt=yuv420p\n", "color_range=tv\n",
                           "color_space=bt709\n", "color_transfer=bt709\n",
                           "color_primaries=bt709\n", "r_frame_rate=16/1\n", "nb_frames=17\n"}) {
    EXPECT_NE(fields.find(want), std::string::npos) << "no " << want << "in\n" << fields;
  }
}

TEST(VideoWriter, WriteMp4IsTheEncodedBytesAndLeavesNoTemporary) {
  TempDir dir;
  const fs::path path = dir.path() / "clip.mp4";
  const std::vector<uint8_t> rgb = synthetic_clip(kFrames, kHeight, kWidth);
  // Replaces what was there.
  std::ofstream(path) << "old";
  ASSERT_TRUE(vision::write_mp4(path.string(), rgb.data(), kFrames, kHeight, kWidth).ok());
  auto mp4 = vision::encode_mp4(rgb.data(), kFrames, kHeight, kWidth, {});
  ASSERT_TRUE(mp4.ok());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  // Not compared byte for byte with encode_mp4's: Debian's libx264 (r3095) with its assembly
  // on an AVX-512 machine gave a few bytes' different frames from one call to the next in one
  // process (asm=0 and valgrind's CPU made it repeatable). Both must decode to the clip.
  const std::string bytes = file_bytes(path);
  ASSERT_EQ(bytes.substr(4, 4), "ftyp");
  auto from_file = vision::read_video_file(path.string());
  auto from_bytes = vision::read_video_bytes(*mp4, "clip.mp4");
  ASSERT_TRUE(from_file.ok()) << from_file.status().to_string();
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status().to_string();
  EXPECT_EQ(from_file->info.n_frames, kFrames);
  EXPECT_EQ(from_bytes->info.n_frames, kFrames);
  const size_t frame_bytes = static_cast<size_t>(kHeight * kWidth * 3);
  for (int64_t t = 0; t < kFrames; ++t) {
    const size_t at = static_cast<size_t>(t) * frame_bytes;
    EXPECT_GE(psnr(&rgb[at], &from_file->pixels[at], frame_bytes), kMinPsnrDb) << "frame " << t;
  }
}

std::string error_of(const std::vector<uint8_t>& rgb, int64_t n, int64_t h, int64_t w,
                     const vision::VideoWriteOptions& options = {}) {
  auto r = vision::encode_mp4(rgb.data(), n, h, w, options);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.ok() ? StatusCode::kOk : r.status().code(), StatusCode::kInvalidArgument);
  return r.ok() ? "" : r.status().message();
}

// The message names the problem (gtest prints the whole message on a miss).
#define QS_EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(VideoWriter, BadRequestsSayWhatIsWrong) {
  const std::vector<uint8_t> rgb = synthetic_clip(2, 17, 17);
  QS_EXPECT_HAS(error_of(rgb, 0, 16, 16), "no frames to write (n_frames = 0)");
  QS_EXPECT_HAS(error_of(rgb, -3, 16, 16), "n_frames = -3");
  QS_EXPECT_HAS(error_of(rgb, 1, 0, 16), "16x0 pixels");
  QS_EXPECT_HAS(error_of(rgb, 1, 16, -2), "-2x16 pixels");
  QS_EXPECT_HAS(error_of(rgb, 1, 16, 20000), "more than 16384 a side");
  QS_EXPECT_HAS(error_of(rgb, 1, 17, 16), "16x17 pixels; yuv420p");
  QS_EXPECT_HAS(error_of(rgb, 1, 16, 17), "must be even");
  vision::VideoWriteOptions options;
  options.fps = 0;
  QS_EXPECT_HAS(error_of(rgb, 1, 16, 16, options), "fps must be from 1 to 240, got 0");
  options.fps = 241;
  QS_EXPECT_HAS(error_of(rgb, 1, 16, 16, options), "got 241");
  options = {};
  options.crf = 52;
  QS_EXPECT_HAS(error_of(rgb, 1, 16, 16, options), "crf must be from 0 to 51");
  options = {};
  options.preset = "fastest";
  QS_EXPECT_HAS(error_of(rgb, 1, 16, 16, options), "unknown libx264 preset 'fastest'");
  QS_EXPECT_HAS(error_of(rgb, 1, 16, 16, options), "ultrafast");
  options = {};
  options.threads = -1;
  QS_EXPECT_HAS(error_of(rgb, 1, 16, 16, options), "threads");
  auto null = vision::encode_mp4(nullptr, 1, 16, 16);
  ASSERT_FALSE(null.ok());
  QS_EXPECT_HAS(null.status().message(), "no pixel buffer");
}

TEST(VideoWriter, WriteFailuresLeaveNoFile) {
  TempDir dir;
  const std::vector<uint8_t> rgb = synthetic_clip(2, 16, 16);
  const fs::path missing = dir.path() / "no_such_dir" / "clip.mp4";
  Status s = vision::write_mp4(missing.string(), rgb.data(), 2, 16, 16);
  ASSERT_FALSE(s.ok());
  QS_EXPECT_HAS(s.message(), "does not exist");
  QS_EXPECT_HAS(s.message(), (dir.path() / "no_such_dir").string());
  EXPECT_FALSE(fs::exists(dir.path() / "no_such_dir"));
  // A bad encode writes nothing, not even the temporary, and keeps an old file.
  const fs::path existing = dir.path() / "old.mp4";
  std::ofstream(existing) << "old";
  s = vision::write_mp4(existing.string(), rgb.data(), 2, 15, 16);
  ASSERT_FALSE(s.ok());
  QS_EXPECT_HAS(s.message(), existing.string());
  QS_EXPECT_HAS(s.message(), "must be even");
  EXPECT_EQ(file_bytes(existing), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  // A directory where the file should go: the rename fails and the temporary goes.
  fs::create_directory(dir.path() / "taken.mp4");
  fs::create_directory(dir.path() / "taken.mp4" / "inside");
  s = vision::write_mp4((dir.path() / "taken.mp4").string(), rgb.data(), 2, 16, 16);
  ASSERT_FALSE(s.ok());
  QS_EXPECT_HAS(s.message(), "cannot rename");
  EXPECT_FALSE(fs::exists(dir.path() / "taken.mp4.tmp"));
}

TEST(VideoWriter, PngFramesReadBackExactly) {
  TempDir dir;
  const fs::path frames = dir.path() / "a" / "b";  // made, parents too
  const int64_t n = 3, h = 20, w = 14;             // PNG takes odd sizes
  const std::vector<uint8_t> rgb = synthetic_clip(n, h, w);
  ASSERT_TRUE(vision::write_png_frames(frames.string(), rgb.data(), n, h, w).ok());
  EXPECT_EQ(std::distance(fs::directory_iterator(frames), fs::directory_iterator()), n);
  const size_t frame_bytes = static_cast<size_t>(h * w * 3);
  for (int64_t t = 0; t < n; ++t) {
    const fs::path path = frames / ("frame_000" + std::to_string(t) + ".png");
    int64_t width = 0, height = 0;
    std::vector<uint8_t> back;
    ASSERT_TRUE(diffusion::read_png(path.string(), &width, &height, &back).ok()) << path;
    EXPECT_EQ(width, w);
    EXPECT_EQ(height, h);
    EXPECT_TRUE(std::equal(back.begin(), back.end(), rgb.begin() + long(t * frame_bytes))) << path;
    EXPECT_EQ(back.size(), frame_bytes);
  }
}

TEST(VideoWriter, PngFrameNamesSortPastTenThousand) {
  TempDir dir;
  const int64_t n = 10001;
  const std::vector<uint8_t> rgb(static_cast<size_t>(n) * 2 * 2 * 3, 7);
  ASSERT_TRUE(vision::write_png_frames(dir.path().string(), rgb.data(), n, 2, 2).ok());
  EXPECT_TRUE(fs::exists(dir.path() / "frame_00000.png"));
  EXPECT_TRUE(fs::exists(dir.path() / "frame_10000.png"));
  EXPECT_FALSE(fs::exists(dir.path() / "frame_0000.png"));
}

TEST(VideoWriter, PngFramesRefuseBadRequests) {
  TempDir dir;
  const std::vector<uint8_t> rgb = synthetic_clip(1, 4, 4);
  const fs::path file = dir.path() / "a_file";
  std::ofstream(file) << "x";
  Status s = vision::write_png_frames(file.string(), rgb.data(), 1, 4, 4);
  ASSERT_FALSE(s.ok());
  QS_EXPECT_HAS(s.message(), "cannot create the directory " + file.string());
  s = vision::write_png_frames((dir.path() / "d").string(), rgb.data(), 0, 4, 4);
  ASSERT_FALSE(s.ok());
  QS_EXPECT_HAS(s.message(), "no frames to write");
  EXPECT_FALSE(fs::exists(dir.path() / "d"));
}

}  // namespace
}  // namespace qs
