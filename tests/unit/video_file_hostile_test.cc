// unit: video files that must be refused with a clear Status and never a crash: empty and
// random bytes, other formats, a container without video, every truncation of the two clips,
// and each limit (pixels, frames, length, RGB bytes) checked before decoding; a picker's
// errors and bad answers; the audio track's absence.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "vision/video_file.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

const fs::path kVideo = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/video";

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string error_of(std::string_view bytes, const vision::VideoReadOptions& options = {},
                     const vision::VideoFramePicker& pick = {}) {
  auto r = vision::read_video_bytes(bytes, "upload.mp4", pick, options);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(VideoFileHostile, EmptyRandomAndOtherFormatsAreNotVideos) {
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  std::mt19937 rng(3);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  EXPECT_NE(error_of(noise).find("not a video"), std::string::npos);
  // Text would be FFmpeg's "tty" video and a WAV its audio demuxer: neither is on the list.
  EXPECT_NE(error_of(std::string(2000, 'a')).find("not a video"), std::string::npos);
  const std::string wav =
      file_bytes(fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/audio/hello_16k.wav");
  ASSERT_FALSE(wav.empty());
  EXPECT_NE(error_of(wav).find("not a video"), std::string::npos);
  const std::string png =
      file_bytes(fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vision/tiny_20x20.png");
  EXPECT_NE(error_of(png).find("not a video"), std::string::npos);
}

TEST(VideoFileHostile, AudioOnlyContainerHasNoVideoStream) {
  const std::string m4a = file_bytes(kVideo / "tone_audio_only.m4a");
  ASSERT_FALSE(m4a.empty());
  EXPECT_NE(error_of(m4a).find("no video stream"), std::string::npos);
  // Its sound is still there to hear.
  auto pcm = vision::read_video_audio_bytes(m4a, "tone.m4a");
  ASSERT_TRUE(pcm.ok()) << pcm.status().to_string();
  EXPECT_NEAR(static_cast<double>(pcm->size()), 0.25 * 16000, 0.05 * 16000);
}

TEST(VideoFileHostile, NoAudioTrackIsSaid) {
  auto pcm = vision::read_video_audio_bytes(file_bytes(kVideo / "pattern_rgb.mov"), "rgb.mov");
  ASSERT_FALSE(pcm.ok());
  EXPECT_NE(pcm.status().message().find("no audio track"), std::string::npos);
}

// Every prefix of each clip (in steps) is refused or read whole; none crashes, and a prefix
// that still decodes never claims more frames than the clip has.
TEST(VideoFileHostile, TruncatedClipsAreRefused) {
  for (const char* clip : {"pattern_h264.mp4", "pattern_rgb.mov"}) {
    const std::string bytes = file_bytes(kVideo / clip);
    ASSERT_GT(bytes.size(), 1000u);
    int refused = 0;
    for (size_t n = 1; n < bytes.size(); n += 97) {
      auto r = vision::read_video_bytes(std::string_view(bytes).substr(0, n), "cut");
      if (!r.ok()) {
        EXPECT_FALSE(r.status().message().empty());
        ++refused;
      } else {
        EXPECT_LE(r->info.n_frames, 20);
        EXPECT_EQ(r->pixels.size(), r->indices.size() * 64 * 48 * 3);
      }
    }
    EXPECT_GT(refused, 0) << clip;
  }
}

TEST(VideoFileHostile, LimitsAreCheckedBeforeDecoding) {
  const std::string mp4 = file_bytes(kVideo / "pattern_h264.mp4");
  std::string e = error_of(mp4, {.max_pixels = 1000});
  EXPECT_NE(e.find("64x48"), std::string::npos) << e;
  e = error_of(mp4, {.max_frames = 10});
  EXPECT_NE(e.find("more than 10 frames"), std::string::npos) << e;
  e = error_of(mp4, {.max_seconds = 1.5});
  EXPECT_NE(e.find("lasts 2"), std::string::npos) << e;
  e = error_of(mp4, {.max_rgb_bytes = 64 * 48 * 3 * 5});
  EXPECT_NE(e.find("20 frames of 64x48"), std::string::npos) << e;
  // Within the limits it reads.
  EXPECT_TRUE(vision::read_video_bytes(mp4, "ok", {}, {.max_frames = 20, .max_seconds = 2.0}).ok());
}

TEST(VideoFileHostile, PickerErrorsAndBadAnswers) {
  const std::string mov = file_bytes(kVideo / "pattern_rgb.mov");
  std::string e = error_of(mov, {}, [](const vision::VideoInfo&) -> Result<std::vector<int64_t>> {
    return invalid_argument("too short to sample");
  });
  EXPECT_EQ(e, "upload.mp4: too short to sample");
  e = error_of(mov, {}, [](const vision::VideoInfo&) -> Result<std::vector<int64_t>> {
    return std::vector<int64_t>{3, 1};
  });
  EXPECT_NE(e.find("out of order"), std::string::npos) << e;
  e = error_of(mov, {}, [](const vision::VideoInfo& info) -> Result<std::vector<int64_t>> {
    return std::vector<int64_t>{info.n_frames};
  });
  EXPECT_NE(e.find("outside"), std::string::npos) << e;
  // Repeats are allowed and copied.
  auto r = vision::read_video_bytes(mov, "mov", [](const vision::VideoInfo&) {
    return Result<std::vector<int64_t>>(std::vector<int64_t>{2, 2, 12});
  });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const size_t frame = 64 * 48 * 3;
  ASSERT_EQ(r->pixels.size(), 3 * frame);
  EXPECT_TRUE(std::equal(r->pixels.begin(), r->pixels.begin() + frame, r->pixels.begin() + frame));
  EXPECT_DOUBLE_EQ(r->seconds[2], 2.0);  // frame 12 at 6 fps
}

TEST(VideoFileHostile, MissingPathIsNotFound) {
  auto r = vision::read_video_file("/nonexistent/clip.mp4");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace qs
