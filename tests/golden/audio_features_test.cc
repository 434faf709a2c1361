// golden: the audio front end against its references (scripts/golden/gen_audio_fixtures.py,
// tests/golden/fixtures/audio/README.md): log-mel features equal transformers'
// WhisperFeatureExtractor and faster-whisper's FeatureExtractor within 1e-4, the mel filter
// bank equals librosa's, every container reads at its rate and length, and 22.05 kHz stereo
// comes out as python-soxr resamples its channel mean.
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
#include "audio/log_mel.h"
#include "audio/sound_file.h"
#include "core/json.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kAudioFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/audio";

const json& reference() {
  static const json ref = [] {
    auto r = read_json((kAudioFixtures / "reference.json").string());
    QS_CHECK_MSG(r.ok(), r.status().to_string().c_str());
    return *r;
  }();
  return ref;
}

std::vector<float> reference_array(const json& entry) {
  int64_t count = 1;
  for (const auto& d : entry["shape"]) count *= d.get<int64_t>();
  return testing::read_floats(kAudioFixtures / entry["file"].get<std::string>(), 0, count);
}

std::vector<float> read_clip(const std::string& file) {
  auto sound = audio::read_sound_file((kAudioFixtures / file).string(), {.target_rate = 0});
  QS_CHECK_MSG(sound.ok(), sound.status().to_string().c_str());
  return sound->samples;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Max |ours - reference| over the reference's frames (the first `ref_frames` of ours).
double max_feature_error(const audio::LogMel& ours, const std::vector<float>& ref, int64_t n_mels,
                         int64_t ref_frames) {
  double err = 0.0;
  for (int64_t m = 0; m < n_mels; ++m) {
    for (int64_t t = 0; t < ref_frames; ++t) {
      const double d = ours.values[m * ours.n_frames + t] - ref[m * ref_frames + t];
      err = std::max(err, std::fabs(d));
    }
  }
  return err;
}

TEST(AudioFeatures, MelFilterBankEqualsLibrosas) {
  for (const auto& [n_mels_key, bank_ref] : reference()["mel_banks"].items()) {
    const int64_t n_mels = std::stoll(n_mels_key);
    const auto bank = audio::mel_filter_bank(16000, 400, n_mels, 0.0, 8000.0);
    ASSERT_EQ(bank.n_bins, 201);
    double err = 0.0;
    for (int64_t m = 0; m < n_mels; ++m) {
      const int64_t first = bank_ref["first"][m].get<int64_t>();
      const auto& weights = bank_ref["weights"][m];
      EXPECT_EQ(bank.first[m], first) << "row " << m;
      EXPECT_EQ(bank.end[m], first + static_cast<int64_t>(weights.size())) << "row " << m;
      for (int64_t k = 0; k < bank.n_bins; ++k) {
        const bool inside = k >= first && k < first + static_cast<int64_t>(weights.size());
        const double expected = inside ? weights[k - first].get<double>() : 0.0;
        err = std::max(err, std::fabs(bank.weights[m * bank.n_bins + k] - expected));
      }
    }
    std::printf("mel bank %lld bins: max |ours - librosa| = %.3g\n", static_cast<long long>(n_mels),
                err);
    EXPECT_LT(err, 1e-12) << n_mels << " bins";
  }
}

TEST(AudioFeatures, EqualTransformersWhisperFeatureExtractor) {
  int checked = 0;
  for (const auto& [name, entry] : reference()["features"].items()) {
    if (!entry.contains("total_frames")) continue;
    const int64_t n_mels = entry["n_mels"].get<int64_t>();
    const int64_t ref_frames = entry["shape"][1].get<int64_t>();
    const auto samples = read_clip(entry["clip"].get<std::string>());
    auto features = audio::whisper_features_hf(samples, {.n_mels = n_mels});
    ASSERT_TRUE(features.ok()) << features.status().to_string();
    ASSERT_EQ(features->n_mels, n_mels);
    ASSERT_EQ(features->n_frames, entry["total_frames"].get<int64_t>());
    const double err = max_feature_error(*features, reference_array(entry), n_mels, ref_frames);
    std::printf("%s: max |ours - transformers| = %.3g\n", name.c_str(), err);
    EXPECT_LT(err, 1e-4) << name;
    // The frames the fixture leaves out are padding, all at the floor.
    const float floor = entry["floor"].get<float>();
    double pad_err = 0.0;
    for (int64_t m = 0; m < n_mels; ++m) {
      for (int64_t t = ref_frames; t < features->n_frames; ++t) {
        pad_err = std::max(pad_err,
                           std::fabs(double{features->values[m * features->n_frames + t]} - floor));
      }
    }
    EXPECT_LT(pad_err, 1e-4) << name;
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

TEST(AudioFeatures, EqualFasterWhispersFeatureExtractor) {
  int checked = 0;
  for (const auto& [name, entry] : reference()["features"].items()) {
    if (!entry.contains("padding")) continue;
    const int64_t n_mels = entry["n_mels"].get<int64_t>();
    const auto samples = read_clip(entry["clip"].get<std::string>());
    auto features =
        audio::whisper_features_whole(samples, entry["padding"].get<int64_t>(), {.n_mels = n_mels});
    ASSERT_TRUE(features.ok()) << features.status().to_string();
    ASSERT_EQ(features->n_frames, entry["shape"][1].get<int64_t>());
    const double err =
        max_feature_error(*features, reference_array(entry), n_mels, features->n_frames);
    std::printf("%s: max |ours - faster-whisper| = %.3g\n", name.c_str(), err);
    EXPECT_LT(err, 1e-4) << name;
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

TEST(AudioRead, EveryContainerGivesItsRateChannelsAndLength) {
  for (const auto& [file, info] : reference()["files"].items()) {
    const fs::path path = kAudioFixtures / file;
    auto sound = audio::read_sound_file(path.string(), {.target_rate = audio::kKeepRate});
    ASSERT_TRUE(sound.ok()) << sound.status().to_string();
    EXPECT_EQ(sound->source_rate, info["sample_rate"].get<int64_t>()) << file;
    EXPECT_EQ(sound->sample_rate, sound->source_rate) << file;
    EXPECT_EQ(sound->source_channels, info["channels"].get<int>()) << file;
    EXPECT_EQ(sound->source_frames, info["frames"].get<int64_t>()) << file;
    EXPECT_EQ(static_cast<int64_t>(sound->samples.size()), sound->source_frames) << file;
    // An upload's bytes read exactly as the file does.
    auto from_bytes = audio::read_sound_bytes(file_bytes(path), file, {.target_rate = 0});
    ASSERT_TRUE(from_bytes.ok()) << from_bytes.status().to_string();
    EXPECT_EQ(from_bytes->samples, sound->samples) << file;
  }
}

TEST(AudioRead, SixteenBitSamplesAreScaledBy32768AndNotResampledAt16kHz) {
  const fs::path path = kAudioFixtures / "hello_16k.wav";
  const std::string bytes = file_bytes(path);
  const size_t data = bytes.find("data");
  ASSERT_NE(data, std::string::npos);
  auto sound = audio::read_sound_file(path.string());  // target 16 kHz: the file's own rate
  ASSERT_TRUE(sound.ok()) << sound.status().to_string();
  ASSERT_EQ(sound->sample_rate, 16000);
  ASSERT_EQ(sound->samples.size(), (bytes.size() - data - 8) / 2);
  for (size_t i = 0; i < sound->samples.size(); ++i) {
    const auto lo = static_cast<uint8_t>(bytes[data + 8 + 2 * i]);
    const auto hi = static_cast<uint8_t>(bytes[data + 9 + 2 * i]);
    const auto s = static_cast<int16_t>(lo | hi << 8);
    ASSERT_EQ(sound->samples[i], static_cast<float>(s) / 32768.0f) << "sample " << i;
  }
}

TEST(AudioRead, StereoAt22050HzMatchesPythonSoxrOnTheChannelMean) {
  const json& entry = reference()["resampled"]["fox_22050_stereo"];
  auto sound = audio::read_sound_file((kAudioFixtures / entry["clip"].get<std::string>()).string(),
                                      {.target_rate = entry["to_rate"].get<int64_t>()});
  ASSERT_TRUE(sound.ok()) << sound.status().to_string();
  EXPECT_EQ(sound->source_rate, 22050);
  EXPECT_EQ(sound->source_channels, 2);
  const auto ref = reference_array(entry);
  ASSERT_EQ(sound->samples.size(), ref.size());
  double err = 0.0, peak = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::fabs(double{sound->samples[i]} - ref[i]));
    peak = std::max(peak, std::fabs(double{ref[i]}));
  }
  std::printf("22050 Hz stereo -> 16 kHz: max |ours - python-soxr| = %.3g (peak %.3f)\n", err,
              peak);
  EXPECT_LT(err, 1e-5);
}

// Lossy decodes cannot be compared sample by sample; they must still be the same speech.
TEST(AudioRead, LossyContainersDecodeToTheOriginalSpeech) {
  const auto original = read_clip("hello_16k.wav");
  for (const char* file : {"hello_16k.ogg", "hello_16k.mp3"}) {
    const auto decoded = read_clip(file);
    ASSERT_EQ(decoded.size(), original.size()) << file;
    double signal = 0.0, noise = 0.0;
    for (size_t i = 0; i < original.size(); ++i) {
      signal += double{original[i]} * original[i];
      noise += (double{decoded[i]} - original[i]) * (double{decoded[i]} - original[i]);
    }
    const double snr_db = 10.0 * std::log10(signal / noise);
    std::printf("%s: SNR against the WAV %.1f dB\n", file, snr_db);
    EXPECT_GT(snr_db, 10.0) << file;
  }
}

}  // namespace
}  // namespace qs
