// unit: audio/log_mel.h and log_mel_config.h without references: preprocessor_config.json
// parsing (defaults, Whisper large-v3's 128 bins, wrong types and inconsistent fields named),
// frame counts of the three entry points, silence at the floor, short inputs, and the FFTW
// plan cache under concurrent callers.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "audio/log_mel.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<float> chirp(int64_t n) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / 16000.0;
    x[i] = static_cast<float>(0.3 * std::sin(2 * M_PI * (200 + 1500 * t) * t));
  }
  return x;
}

TEST(AudioLogMelConfig, DefaultsAreWhispers) {
  auto c = audio::parse_log_mel_config(json::object(), "preprocessor_config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->n_mels, 80);
  EXPECT_EQ(c->sample_rate, 16000);
  EXPECT_EQ(c->hop_length, 160);
  EXPECT_EQ(c->n_fft, 400);
  EXPECT_EQ(c->chunk_length, 30);
  EXPECT_EQ(c->n_samples, 480000);
  EXPECT_EQ(c->nb_max_frames, 3000);
}

TEST(AudioLogMelConfig, ReadsLargeV3sFile) {
  // openai/whisper-large-v3's preprocessor_config.json, less its long lists.
  const json j = json::parse(R"({
    "chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 128, "hop_length": 160, "n_fft": 400, "n_samples": 480000,
    "nb_max_frames": 3000, "padding_side": "right", "padding_value": 0.0,
    "processor_class": "WhisperProcessor", "return_attention_mask": false,
    "sampling_rate": 16000})");
  auto c = audio::parse_log_mel_config(j, "large-v3");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->n_mels, 128);
  // Python may write integers as floats.
  auto f = audio::parse_log_mel_config(json{{"sampling_rate", 16000.0}}, "x");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->sample_rate, 16000);
}

TEST(AudioLogMelConfig, BadFieldsAreNamed) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array(), "expected a JSON object"},
      {{{"feature_size", "80"}}, "'feature_size' must be an integer"},
      {{{"feature_size", 80.5}}, "'feature_size' must be an integer"},
      {{{"hop_length", true}}, "'hop_length' must be an integer"},
      {{{"n_fft", 18446744073709551615ull}}, "'n_fft' must be an integer"},
      {{{"feature_size", 0}}, "'feature_size' is 0"},
      {{{"n_fft", 1}}, "'n_fft' is 1"},
      {{{"hop_length", -160}}, "'hop_length' is -160"},
      {{{"sampling_rate", 0}}, "'sampling_rate' is 0"},
      {{{"chunk_length", 100000}}, "'chunk_length' is 100000"},
      {{{"n_samples", 480001}}, "'n_samples' is 480001"},
      {{{"nb_max_frames", 1500}}, "'nb_max_frames' is 1500"},
  };
  for (const auto& [j, expected] : cases) {
    auto c = audio::parse_log_mel_config(j, "cfg.json");
    ASSERT_FALSE(c.ok()) << j.dump();
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << j.dump();
    EXPECT_TRUE(has(c.status().message(), "cfg.json: " + expected)) << c.status().to_string();
  }
}

TEST(AudioLogMelConfig, LoadsFromADirectoryOrDefaults) {
  const fs::path dir = fs::temp_directory_path() / ("qs_audio_log_mel_" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto absent = audio::load_log_mel_config(dir.string());
  ASSERT_TRUE(absent.ok()) << absent.status().to_string();
  EXPECT_EQ(absent->n_mels, 80);
  std::ofstream(dir / "preprocessor_config.json") << R"({"feature_size": 128})";
  auto present = audio::load_log_mel_config(dir.string());
  ASSERT_TRUE(present.ok()) << present.status().to_string();
  EXPECT_EQ(present->n_mels, 128);
  std::ofstream(dir / "preprocessor_config.json") << R"({"feature_size": )";
  auto broken = audio::load_log_mel_config(dir.string());
  ASSERT_FALSE(broken.ok());
  EXPECT_TRUE(has(broken.status().message(), "preprocessor_config.json"))
      << broken.status().to_string();
  fs::remove_all(dir);
}

TEST(AudioLogMel, FrameCountsFollowEachCaller) {
  const auto x = chirp(16000 + 37);
  auto plain = audio::log_mel_spectrogram(x, {});
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->n_frames, static_cast<int64_t>(x.size()) / 160);
  EXPECT_EQ(plain->values.size(), static_cast<size_t>(80 * plain->n_frames));
  auto whole = audio::whisper_features_whole(x);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_EQ(whole->n_frames, static_cast<int64_t>(x.size()) / 160 + 1);
  auto hf = audio::whisper_features_hf(x, {.n_mels = 128});
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ(hf->n_mels, 128);
  EXPECT_EQ(hf->n_frames, 3000);
  // More than 30 s is cut to 30 s.
  auto long_hf = audio::whisper_features_hf(chirp(480000 + 16000));
  ASSERT_TRUE(long_hf.ok());
  EXPECT_EQ(long_hf->n_frames, 3000);
}

TEST(AudioLogMel, SilenceSitsAtTheFloor) {
  // log10(1e-10) = -10 everywhere, so the maximum is -10 and every value (-10 + 4) / 4.
  auto hf = audio::whisper_features_hf({});
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  for (float v : hf->values) ASSERT_EQ(v, -1.5f);
  auto whole = audio::whisper_features_whole({});
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_EQ(whole->n_frames, 1);
}

TEST(AudioLogMel, ShortAndBadInputsAreErrors) {
  EXPECT_FALSE(audio::log_mel_spectrogram({}, {}).ok());
  const std::vector<float> one = {0.5f};
  EXPECT_FALSE(audio::log_mel_spectrogram(one, {}).ok());  // no whole hop
  EXPECT_FALSE(audio::whisper_features_whole(one, -1).ok());
  EXPECT_FALSE(audio::log_mel_spectrogram(chirp(1000), {.n_fft = 0}).ok());
  // Shorter than half a window: numpy's reflect padding mirrors again and again.
  auto tiny = audio::log_mel_spectrogram(chirp(170), {});
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  EXPECT_EQ(tiny->n_frames, 1);
}

TEST(AudioLogMel, ConcurrentCallersShareThePlans) {
  const auto x = chirp(48000);
  const std::vector<int64_t> sizes = {400, 512, 256, 400, 1024, 512};
  std::vector<audio::LogMel> alone;
  for (int64_t n_fft : sizes) {
    auto r = audio::log_mel_spectrogram(x, {.n_fft = n_fft});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    alone.push_back(*r);
  }
  std::vector<audio::LogMel> together(sizes.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < sizes.size(); ++i) {
    threads.emplace_back([&, i] {
      auto r = audio::log_mel_spectrogram(x, {.n_fft = sizes[i]});
      if (r.ok()) together[i] = *r;
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(together[i].values, alone[i].values) << i;
}

}  // namespace
}  // namespace qs
