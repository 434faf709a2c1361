// golden: the Whisper encoder-decoder against transformers on a random tiny checkpoint
// (tests/golden/fixtures/whisper, made by scripts/golden/gen_whisper_fixtures.py): encoder
// output, the logits of a whole prompt, and a greedy continuation fed one token at a time
// over the KV cache, alone and batched beside another sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../common/reference_tensors.h"
#include "audio/whisper_model.h"
#include "io/checkpoint.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/whisper";

class WhisperGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = audio::WhisperModel::load((kDir / "tiny_random").string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::make_unique<audio::WhisperModel>(std::move(*m));
  }
  std::vector<float> f32(const std::string& n) { return ref_.f32(n); }
  std::vector<int32_t> i32(const std::string& n) { return ref_.i32(n); }
  // Largest |a - b| relative to the largest |b|: the logits here reach tens, so a plain
  // absolute bound would be loose for small values and tight for large ones.
  static float rel_err(const float* a, const float* b, size_t n) {
    float err = 0, mag = 0;
    for (size_t i = 0; i < n; ++i) {
      err = std::max(err, std::fabs(a[i] - b[i]));
      mag = std::max(mag, std::fabs(b[i]));
    }
    return err / mag;
  }

  testing::ReferenceTensors ref_{kDir / "reference.safetensors"};
  std::unique_ptr<audio::WhisperModel> model_;
  ThreadPool pool_{2};
};

TEST_F(WhisperGolden, EncoderMatchesTransformers) {
  std::vector<float> enc;
  ASSERT_TRUE(model_->encode(f32("features").data(), &enc, pool_).ok());
  const std::vector<float> want = f32("encoder_out");
  ASSERT_EQ(enc.size(), want.size());
  EXPECT_LT(rel_err(enc.data(), want.data(), want.size()), 1e-4f);
}

TEST_F(WhisperGolden, PromptLogitsMatchTransformers) {
  std::vector<float> enc, logits;
  ASSERT_TRUE(model_->encode(f32("features").data(), &enc, pool_).ok());
  audio::WhisperDecoderState s;
  ASSERT_TRUE(model_->start(enc.data(), model_->config().max_source_positions, &s, pool_).ok());
  audio::WhisperDecoderState* states[] = {&s};
  const std::vector<int32_t> prompt = i32("prompt_ids");
  const std::vector<std::vector<int32_t>> toks = {prompt};
  ASSERT_TRUE(model_->decode(states, toks, true, &logits, pool_).ok());
  const std::vector<float> want = f32("prompt_logits");
  ASSERT_EQ(logits.size(), want.size());
  EXPECT_LT(rel_err(logits.data(), want.data(), want.size()), 1e-4f);
  EXPECT_EQ(s.length, static_cast<int64_t>(prompt.size()));
}

// The prompt, then one token per step: the greedy tokens and the logits that chose them
// equal transformers', alone and with a second sequence (another prompt) in the same batch.
TEST_F(WhisperGolden, GreedyStepsOverTheCacheMatchTransformers) {
  std::vector<float> enc;
  ASSERT_TRUE(model_->encode(f32("features").data(), &enc, pool_).ok());
  const int64_t n_src = model_->config().max_source_positions, vocab = 300;
  const std::vector<int32_t> prompt = i32("prompt_ids"), greedy = i32("greedy_ids");
  const std::vector<float> want = f32("step_logits");
  for (bool batched : {false, true}) {
    audio::WhisperDecoderState s, other;
    ASSERT_TRUE(model_->start(enc.data(), n_src, &s, pool_).ok());
    ASSERT_TRUE(model_->start(enc.data(), n_src, &other, pool_).ok());
    std::vector<audio::WhisperDecoderState*> states = {&s};
    std::vector<std::vector<int32_t>> toks = {prompt};
    if (batched) {
      states.push_back(&other);
      toks.push_back({257, 5, 6});
    }
    std::vector<float> logits;
    for (size_t step = 0; step + prompt.size() < greedy.size(); ++step) {
      ASSERT_TRUE(model_->decode(states, toks, false, &logits, pool_).ok());
      const float* row = logits.data();
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      EXPECT_EQ(next, greedy[prompt.size() + step]) << "step " << step << " batched " << batched;
      EXPECT_LT(rel_err(row, want.data() + step * vocab, vocab), 1e-4f) << "step " << step;
      toks[0] = {greedy[prompt.size() + step]};
      if (batched) toks[1] = {static_cast<int32_t>(7 + step)};
    }
  }
}

// Several tokens after a cached past (a prompt of previous text, then the new prompt) give the
// same logits as the whole sequence fed at once.
TEST_F(WhisperGolden, ChunkAfterThePastMatchesOneChunk) {
  std::vector<float> enc, whole, split;
  ASSERT_TRUE(model_->encode(f32("features").data(), &enc, pool_).ok());
  const std::vector<int32_t> g = i32("greedy_ids");
  audio::WhisperDecoderState a, b;
  ASSERT_TRUE(model_->start(enc.data(), 100, &a, pool_).ok());
  ASSERT_TRUE(model_->start(enc.data(), 100, &b, pool_).ok());
  audio::WhisperDecoderState* sa[] = {&a};
  audio::WhisperDecoderState* sb[] = {&b};
  const std::vector<std::vector<int32_t>> all = {g};
  ASSERT_TRUE(model_->decode(sa, all, true, &whole, pool_).ok());
  const std::vector<std::vector<int32_t>> first = {{g.begin(), g.begin() + 4}};
  const std::vector<std::vector<int32_t>> rest = {{g.begin() + 4, g.end()}};
  ASSERT_TRUE(model_->decode(sb, first, true, &split, pool_).ok());
  ASSERT_TRUE(model_->decode(sb, rest, true, &split, pool_).ok());
  ASSERT_EQ(split.size(), (g.size() - 4) * 300);
  EXPECT_LT(rel_err(split.data(), whole.data() + 4 * 300, split.size()), 1e-5f);
}

TEST_F(WhisperGolden, RefusesBadDecodes) {
  std::vector<float> enc, logits;
  ASSERT_TRUE(model_->encode(f32("features").data(), &enc, pool_).ok());
  audio::WhisperDecoderState s;
  audio::WhisperDecoderState* states[] = {&s};
  const std::vector<std::vector<int32_t>> one = {{257}};
  EXPECT_FALSE(model_->decode(states, one, false, &logits, pool_).ok());  // not started
  ASSERT_TRUE(model_->start(enc.data(), 100, &s, pool_).ok());
  const std::vector<std::vector<int32_t>> bad_id = {{257, 300}};
  EXPECT_FALSE(model_->decode(states, bad_id, false, &logits, pool_).ok());
  const std::vector<std::vector<int32_t>> too_long = {std::vector<int32_t>(25, 3)};
  EXPECT_FALSE(model_->decode(states, too_long, false, &logits, pool_).ok());
  const std::vector<std::vector<int32_t>> none = {{}};
  EXPECT_FALSE(model_->decode(states, none, false, &logits, pool_).ok());
  EXPECT_EQ(s.length, 0);
  EXPECT_FALSE(model_->start(enc.data(), 101, &s, pool_).ok());
}

TEST(WhisperLoad, NamesTheMissingTensor) {
  const fs::path tmp = fs::temp_directory_path() / "qs_whisper_missing";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  fs::copy_file(kDir / "tiny_random/config.json", tmp / "config.json");
  // A checkpoint without Whisper's tensors: loading names the first one missing.
  {
    std::vector<std::pair<std::string, Tensor>> none = {
        {"unrelated", Tensor::zeros(DType::kF32, {2})}};
    ASSERT_TRUE(io::write_safetensors((tmp / "model.safetensors").string(), none).ok());
  }
  auto m = audio::WhisperModel::load(tmp.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().to_string().find("model.encoder.conv1.weight"), std::string::npos)
      << m.status().to_string();
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace qs
