// unit: audio/sound_file.h on files made here: each WAV encoding (8/16/24/32-bit PCM, float)
// scaled as libsndfile's float read scales it, the channel mean, and every hostile input an
// upload can be (empty, random bytes, text, truncated WAV and FLAC at every cut, 0 Hz and
// absurd rates, too many channels, a 3-hour header, NaN samples) refused with an error naming
// the file, from a path and from bytes alike.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "audio/sound_file.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

const fs::path kAudioFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/audio";

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

struct WavSpec {
  int64_t rate = 16000;
  int channels = 1;
  int bits = 16;
  int format_tag = 1;  // 1: PCM, 3: IEEE float
  std::optional<uint32_t> declared_data =
      std::nullopt;  // the data chunk's size field, if not the real one
};

// A canonical 44-byte-header WAV around `data`.
std::string wav(const WavSpec& w, const std::string& data) {
  const uint32_t block = static_cast<uint32_t>(w.channels * w.bits / 8);
  std::string fmt = le(w.format_tag, 2) + le(w.channels, 2) + le(w.rate, 4) +
                    le(w.rate * block, 4) + le(block, 2) + le(w.bits, 2);
  const uint32_t data_size = w.declared_data.value_or(static_cast<uint32_t>(data.size()));
  std::string body = "WAVEfmt " + le(fmt.size(), 4) + fmt + "data" + le(data_size, 4) + data;
  return "RIFF" + le(body.size(), 4) + body;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

class AudioSoundFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qs_audio_sound_file_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return (dir_ / name).string();
  }
  // Reads `bytes` both ways; both must fail, each naming its source. Returns the path's error.
  Status refused(const std::string& name, const std::string& bytes,
                 const audio::ReadOptions& options = {}) {
    const std::string path = write(name, bytes);
    auto from_path = audio::read_sound_file(path, options);
    auto from_bytes = audio::read_sound_bytes(bytes, name, options);
    EXPECT_FALSE(from_path.ok()) << name << " (" << bytes.size() << " bytes) was read";
    EXPECT_FALSE(from_bytes.ok()) << name << " (" << bytes.size() << " bytes) was read";
    if (from_path.ok() || from_bytes.ok()) return ok_status();
    EXPECT_TRUE(has(from_path.status().message(), path)) << from_path.status().to_string();
    EXPECT_TRUE(has(from_bytes.status().message(), name)) << from_bytes.status().to_string();
    EXPECT_EQ(from_path.status().code(), from_bytes.status().code())
        << from_path.status().to_string() << " | " << from_bytes.status().to_string();
    return from_path.status();
  }
  fs::path dir_;
};

TEST_F(AudioSoundFile, EachPcmWidthAndFloatScaleAsLibsndfileReads) {
  const std::vector<int64_t> codes = {0, 1, -1, 1000, -1000, 32767, -32768};
  for (int bits : {8, 16, 24, 32}) {
    std::string data;
    std::vector<float> expected;
    for (int64_t c : codes) {
      // 8-bit WAV is unsigned; wider ones are signed, the 16-bit pattern scaled up.
      const int64_t v = bits == 8 ? c >> 8 : c << (bits - 16);
      data += bits == 8 ? le(static_cast<uint64_t>(v + 128), 1)
                        : le(static_cast<uint64_t>(v), bits / 8);
      expected.push_back(static_cast<float>(static_cast<double>(v) / std::ldexp(1.0, bits - 1)));
    }
    auto sound = audio::read_sound_bytes(wav({.bits = bits}, data), "pcm.wav");
    ASSERT_TRUE(sound.ok()) << bits << ": " << sound.status().to_string();
    EXPECT_EQ(sound->samples, expected) << bits << "-bit";
  }
  std::string data;
  for (float f : {0.0f, 0.25f, -0.5f, 1.0f, 2.5f, -7.0f}) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    data += le(u, 4);
  }
  auto sound = audio::read_sound_bytes(wav({.bits = 32, .format_tag = 3}, data), "float.wav");
  ASSERT_TRUE(sound.ok()) << sound.status().to_string();
  // Past full scale is clipped, as ffmpeg's conversion to 16 bits does in faster-whisper.
  EXPECT_EQ(sound->samples, (std::vector<float>{0.0f, 0.25f, -0.5f, 1.0f, 1.0f, -1.0f}));
}

TEST_F(AudioSoundFile, ChannelsAreAveraged) {
  std::string data;
  for (int i = 0; i < 100; ++i) {
    data += le(static_cast<uint16_t>(i * 100), 2) + le(static_cast<uint16_t>(-i * 30), 2) +
            le(static_cast<uint16_t>(6), 2);
  }
  auto sound = audio::read_sound_bytes(wav({.channels = 3}, data), "three.wav");
  ASSERT_TRUE(sound.ok()) << sound.status().to_string();
  ASSERT_EQ(sound->samples.size(), 100u);
  EXPECT_EQ(sound->source_channels, 3);
  for (int i = 0; i < 100; ++i) {
    const float sum = i * 100 / 32768.0f + -i * 30 / 32768.0f + 6 / 32768.0f;
    EXPECT_EQ(sound->samples[i], sum / 3.0f) << i;
  }
}

TEST_F(AudioSoundFile, ResamplingGivesTheTargetRateAndLength) {
  std::string data;
  for (int i = 0; i < 44100; ++i) {
    data +=
        le(static_cast<uint16_t>(std::lround(8000 * std::sin(2 * M_PI * 440 * i / 44100.0))), 2);
  }
  auto sound = audio::read_sound_bytes(wav({.rate = 44100}, data), "tone.wav");
  ASSERT_TRUE(sound.ok()) << sound.status().to_string();
  EXPECT_EQ(sound->source_rate, 44100);
  EXPECT_EQ(sound->sample_rate, 16000);
  ASSERT_EQ(sound->samples.size(), 16000u);
  // The tone survives at its amplitude and phase, away from the edges.
  double err = 0.0;
  for (int i = 1000; i < 15000; ++i) {
    const double expected = 8000 / 32768.0 * std::sin(2 * M_PI * 440 * i / 16000.0);
    err = std::max(err, std::fabs(sound->samples[i] - expected));
  }
  EXPECT_LT(err, 1e-3);
}

TEST_F(AudioSoundFile, EmptyRandomAndTextAreRefused) {
  EXPECT_TRUE(has(refused("empty.wav", "").message(), "empty"));
  std::mt19937 rng(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  EXPECT_TRUE(has(refused("noise.wav", noise).message(), "not a sound file"));
  EXPECT_FALSE(refused("notes.txt", "Hello, this is a text file and not a recording.\n").ok());
  auto missing = audio::read_sound_file((dir_ / "missing.wav").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  // A RIFF header with no samples in it.
  EXPECT_TRUE(has(refused("silent.wav", wav({}, "")).message(), "no audio"));
}

TEST_F(AudioSoundFile, EveryTruncationOfAWavIsRefused) {
  std::string data;
  for (int i = 0; i < 2000; ++i) data += le(static_cast<uint16_t>(i * 7), 2);
  const std::string full = wav({}, data);
  for (size_t n = 0; n < full.size(); n += n < 64 ? 1 : 397) {
    const Status s = refused("cut.wav", full.substr(0, n));
    if (n > 44) {
      EXPECT_TRUE(has(s.message(), "truncated")) << n << ": " << s.to_string();
      EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    }
  }
  // Streaming writers leave the size unknown: those read to the end of the file.
  auto streamed = audio::read_sound_bytes(wav({.declared_data = 0xFFFFFFFFu}, data), "stream.wav");
  ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();
  EXPECT_EQ(streamed->samples.size(), 2000u);
}

TEST_F(AudioSoundFile, EveryTruncationOfAFlacIsRefused) {
  const std::string full = file_bytes(kAudioFixtures / "fox_22050_stereo.flac");
  ASSERT_GT(full.size(), 1000u);
  for (size_t n = 0; n < full.size(); n += n < 128 ? 13 : 1511)
    EXPECT_FALSE(refused("cut.flac", full.substr(0, n)).ok()) << n;
}

TEST_F(AudioSoundFile, RatesOutsideTheRangeAreRefused) {
  const std::string data(200, '\0');
  for (int64_t rate : {0, 1, 999, 384001, 1000000, 0x7fffffff}) {
    const Status s = refused("rate.wav", wav({.rate = rate}, data));
    EXPECT_TRUE(has(s.message(), "sample rate " + std::to_string(rate) + " Hz")) << s.to_string();
  }
  // The bounds themselves are rates.
  for (int64_t rate : {1000, 384000}) {
    auto sound = audio::read_sound_bytes(wav({.rate = rate}, data), "edge.wav", {.target_rate = 0});
    EXPECT_TRUE(sound.ok()) << rate << ": " << sound.status().to_string();
  }
}

TEST_F(AudioSoundFile, TooManyChannelsAreRefused) {
  const std::string data(200 * 2 * 4, '\0');
  EXPECT_TRUE(has(refused("many.wav", wav({.channels = 200}, data)).message(), "200 channels"));
  EXPECT_TRUE(has(refused("none.wav", wav({.channels = 0}, data)).message(), "0 channels"));
  auto ok = audio::read_sound_bytes(wav({.channels = audio::kMaxChannels}, data), "max.wav");
  EXPECT_TRUE(ok.ok()) << ok.status().to_string();
}

TEST_F(AudioSoundFile, AThreeHourFileIsRefusedFromItsHeader) {
  // A real three-hour WAV, sparse on disk: refused before a sample is decoded.
  const uint64_t data_bytes = uint64_t{3} * 3600 * 16000 * 2;
  const std::string path =
      write("long.wav", wav({.declared_data = static_cast<uint32_t>(data_bytes)}, ""));
  fs::resize_file(path, 44 + data_bytes);
  auto sound = audio::read_sound_file(path, {.max_seconds = 3600});
  ASSERT_FALSE(sound.ok());
  EXPECT_EQ(sound.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(has(sound.status().message(), "10800.0 s")) << sound.status().to_string();
  EXPECT_TRUE(has(sound.status().message(), path)) << sound.status().to_string();
  // The caller's limit holds for bytes too.
  const std::string speech = file_bytes(kAudioFixtures / "hello_16k.wav");
  EXPECT_TRUE(has(refused("speech.wav", speech, {.max_seconds = 1.0}).message(), "limit"));
  EXPECT_TRUE(audio::read_sound_bytes(speech, "speech.wav", {.max_seconds = 2.0}).ok());
}

TEST_F(AudioSoundFile, NonFiniteSamplesAreRefused) {
  const float nan = std::nanf("");
  uint32_t u;
  std::memcpy(&u, &nan, 4);
  const Status s = refused("nan.wav", wav({.bits = 32, .format_tag = 3}, le(0, 4) + le(u, 4)));
  EXPECT_TRUE(has(s.message(), "sample 1")) << s.to_string();
}

TEST_F(AudioSoundFile, BadOptionsAreRefused) {
  const std::string bytes = wav({}, std::string(200, '\0'));
  for (const audio::ReadOptions& o :
       {audio::ReadOptions{.max_seconds = 0}, audio::ReadOptions{.max_seconds = NAN},
        audio::ReadOptions{.target_rate = 5}, audio::ReadOptions{.target_rate = -16000}}) {
    auto sound = audio::read_sound_bytes(bytes, "ok.wav", o);
    ASSERT_FALSE(sound.ok());
    EXPECT_EQ(sound.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace qs
