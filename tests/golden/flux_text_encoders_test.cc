// golden: FLUX.1's text encoders against transformers on the tiny pipeline's CLIPTextModel
// (5 layers, hidden 32, quick-GELU, causal) and T5EncoderModel (2 layers, gated-GELU, 8
// relative-position buckets up to distance 20, which 32 tokens exceed): last hidden states
// and CLIP's pooled output for three prompts, from the token ids transformers' tokenizers made.
#include <gtest/gtest.h>

#include "diffusion/clip_text_model.h"
#include "diffusion/t5_encoder.h"
#include "flux_reference.h"

namespace qs {
namespace {

using testing::expect_close;

std::vector<float> row(const std::vector<float>& all, size_t i, size_t n) {
  return std::vector<float>(all.begin() + i * n, all.begin() + (i + 1) * n);
}

TEST(FluxTextEncoders, ClipMatchesTransformers) {
  testing::FluxReference ref;
  auto clip = diffusion::ClipTextModel::load(testing::kFluxPipeline + "/text_encoder");
  ASSERT_TRUE(clip.ok()) << clip.status().to_string();
  ThreadPool pool(2);
  const auto ids = ref.i32("clip_ids");
  const auto hidden = ref.f32("clip_hidden"), pooled = ref.f32("clip_pooled");
  for (size_t p = 0; p < 3; ++p) {
    std::vector<int32_t> one(ids.begin() + p * 77, ids.begin() + (p + 1) * 77);
    std::vector<float> h, pl;
    ASSERT_TRUE(clip->forward(one, &h, &pl, pool).ok());
    expect_close(h, row(hidden, p, 77 * 32), 1e-5f, 1e-4f, "clip hidden " + std::to_string(p));
    expect_close(pl, row(pooled, p, 32), 1e-5f, 1e-4f, "clip pooled " + std::to_string(p));
  }
  std::vector<float> h;
  EXPECT_FALSE(clip->forward(std::vector<int32_t>(78, 1), &h, nullptr, pool).ok());
  EXPECT_FALSE(clip->forward({5, 1000}, &h, nullptr, pool).ok());
}

TEST(FluxTextEncoders, T5MatchesTransformers) {
  testing::FluxReference ref;
  auto t5 = diffusion::T5Encoder::load(testing::kFluxPipeline + "/text_encoder_2");
  ASSERT_TRUE(t5.ok()) << t5.status().to_string();
  ThreadPool pool(2);
  const auto ids = ref.i32("t5_ids");
  const auto hidden = ref.f32("t5_hidden");
  for (size_t p = 0; p < 3; ++p) {
    std::vector<int32_t> one(ids.begin() + p * 32, ids.begin() + (p + 1) * 32);
    std::vector<float> h;
    ASSERT_TRUE(t5->forward(one, &h, pool).ok());
    expect_close(h, row(hidden, p, 32 * 32), 1e-5f, 1e-4f, "t5 hidden " + std::to_string(p));
  }
}

TEST(FluxTextEncoders, T5RelativeBucketsAsTransformers) {
  // T5's defaults (32 buckets, distance 128); the expected buckets are what transformers'
  // T5Attention._relative_position_bucket(bidirectional=True) returns for these offsets.
  const int64_t offsets[] = {0, -7, 3, -12, -16, -127, 500, -8, 9, 20, -64};
  const int64_t buckets[] = {0, 7, 19, 9, 10, 15, 31, 8, 24, 26, 14};
  for (size_t i = 0; i < std::size(offsets); ++i) {
    EXPECT_EQ(diffusion::t5_relative_bucket(offsets[i], 32, 128), buckets[i]) << offsets[i];
  }
}

}  // namespace
}  // namespace qs
