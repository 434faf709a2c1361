// golden: the real Whisper tiny.en against transformers (reference from
// scripts/golden/gen_whisper_tiny_en_reference.py, float32 from the float16 weights) on
// tests/golden/fixtures/audio/hello_16k.wav: our features through our encoder, the first
// decoder step's logits, and the greedy tokens with timestamps. The model is not in the
// repository: scripts/fetch_whisper.sh imports it into ~/.cache/quantserve/whisper-tiny.en/hf
// (or $QS_WHISPER_TINY_EN); without it the tests skip and say so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/reference_tensors.h"
#include "audio/log_mel.h"
#include "audio/sound_file.h"
#include "audio/transcribe.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
const fs::path kSource(QS_SOURCE_DIR);

std::string model_dir() {
  if (const char* env = std::getenv("QS_WHISPER_TINY_EN")) return env;
  const char* home = std::getenv("HOME");
  return home ? (fs::path(home) / ".cache/quantserve/whisper-tiny.en/hf").string() : "";
}

class WhisperTinyEn : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = model_dir();
    if (dir.empty() || !fs::exists(fs::path(dir) / "model.safetensors")) {
      GTEST_SKIP() << "Whisper tiny.en not found at " << dir
                   << " (scripts/fetch_whisper.sh imports it)";
    }
    auto w = audio::WhisperTranscriber::load(dir);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    whisper_ = std::make_unique<audio::WhisperTranscriber>(std::move(*w));
    auto sound =
        audio::read_sound_file((kSource / "tests/golden/fixtures/audio/hello_16k.wav").string());
    ASSERT_TRUE(sound.ok());
    auto feats = audio::whisper_features_hf(sound->samples);
    ASSERT_TRUE(feats.ok());
    ASSERT_TRUE(whisper_->model().encode(feats->values.data(), &enc_, pool_).ok());
  }

  std::unique_ptr<audio::WhisperTranscriber> whisper_;
  testing::ReferenceTensors ref_{kSource /
                                 "tests/golden/fixtures/whisper/tiny_en_reference.safetensors"};
  std::vector<float> enc_;
  ThreadPool pool_{2};
};

TEST_F(WhisperTinyEn, EncoderMatchesTransformers) {
  const Tensor& want = ref_.at("encoder_rows");  // [100, 384]
  const std::vector<float> got(enc_.begin(), enc_.begin() + want.numel());
  EXPECT_EQ(testing::count_off(got.data(), want.ptr<float>(), got.size()), 0);
}

TEST_F(WhisperTinyEn, FirstStepLogitsMatchTransformers) {
  audio::WhisperDecoderState s;
  const int64_t n_src = whisper_->model().config().max_source_positions;
  ASSERT_TRUE(whisper_->model().start(enc_.data(), n_src, &s, pool_).ok());
  audio::WhisperDecoderState* states[] = {&s};
  const std::vector<std::vector<int32_t>> sot = {{whisper_->tokens().sot}};
  std::vector<float> logits;
  ASSERT_TRUE(whisper_->model().decode(states, sot, false, &logits, pool_).ok());
  const Tensor& want = ref_.at("sot_logits");
  ASSERT_EQ(static_cast<int64_t>(logits.size()), want.numel());
  EXPECT_EQ(testing::count_off(logits.data(), want.ptr<float>(), logits.size()), 0);
}

// transformers' generate() with timestamps and our window decoder (CTranslate2's rules) pick
// the same tokens on this clip.
TEST_F(WhisperTinyEn, GreedyTokensMatchTransformers) {
  audio::TranscribeOptions o = whisper_->default_options();
  o.decode.temperatures = {0.0f};
  std::mt19937_64 rng(0);
  auto r = audio::decode_window(whisper_->model(), whisper_->tokenizer(), whisper_->tokens(),
                                enc_.data(), whisper_->model().config().max_source_positions,
                                {whisper_->tokens().sot}, o.decode, rng, pool_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Tensor& want = ref_.at("greedy_ids");
  std::vector<int32_t> expected(want.ptr<int32_t>(), want.ptr<int32_t>() + want.numel());
  // generate() returns the tokens after the prompt, ending with <|endoftext|>.
  if (!expected.empty() && expected.back() == whisper_->tokens().eot) expected.pop_back();
  if (!expected.empty() && expected.front() == whisper_->tokens().sot) {
    expected.erase(expected.begin());
  }
  EXPECT_EQ(r->tokens, expected);
}

}  // namespace
}  // namespace qs
