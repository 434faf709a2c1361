// golden: the tiny pipeline's tokenizers against transformers' CLIPTokenizer and
// T5TokenizerFast: the ids reference.safetensors holds for three prompts (mixed case,
// punctuation, digits, characters the T5 vocabulary lacks), padded to 77 and 32.
#include <gtest/gtest.h>

#include "flux_reference.h"
#include "tokenizer/clip_tokenizer.h"
#include "tokenizer/unigram_tokenizer.h"

namespace qs {
namespace {

const char* const kPrompts[] = {
    "a photograph of an astronaut riding a horse",
    "A Cat wearing a small hat, studio lighting!",
    "watercolor mountains and a lake at sunrise 2024",
};

TEST(FluxTokenizers, ClipIdsMatchTransformers) {
  testing::FluxReference ref;
  auto tok = tok::ClipTokenizer::load(testing::kFluxPipeline + "/tokenizer");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto ids = ref.i32("clip_ids");
  for (size_t p = 0; p < 3; ++p) {
    std::vector<int32_t> want(ids.begin() + p * 77, ids.begin() + (p + 1) * 77);
    EXPECT_EQ((*tok)->encode_padded(kPrompts[p], 77), want) << kPrompts[p];
  }
  // Truncation keeps the closing <|endoftext|>.
  std::string long_prompt;
  for (int i = 0; i < 100; ++i) long_prompt += "horse ";
  auto cut = (*tok)->encode_padded(long_prompt, 77);
  ASSERT_EQ(cut.size(), 77u);
  EXPECT_EQ(cut.front(), (*tok)->bos_id());
  EXPECT_EQ(cut.back(), (*tok)->eos_id());
  // A hostile prompt (one 1 MB word, then a million more) costs bounded time and still gives
  // 77 ids; the limit on tokens does not change the ones kept.
  auto hostile = (*tok)->encode_padded(std::string(1 << 20, 'a') + long_prompt, 77);
  EXPECT_EQ(hostile.size(), 77u);
  const std::vector<int32_t> all = (*tok)->encode(long_prompt);
  ASSERT_GT(all.size(), 20u);
  EXPECT_EQ((*tok)->encode(long_prompt, 20), std::vector<int32_t>(all.begin(), all.begin() + 20));
}

TEST(FluxTokenizers, T5IdsMatchTransformers) {
  testing::FluxReference ref;
  auto tok = tok::UnigramTokenizer::load(testing::kFluxPipeline + "/tokenizer_2");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto ids = ref.i32("t5_ids");
  for (size_t p = 0; p < 3; ++p) {
    std::vector<int32_t> want(ids.begin() + p * 32, ids.begin() + (p + 1) * 32);
    auto got = (*tok)->encode_padded(kPrompts[p], 32);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, want) << kPrompts[p];
  }
  EXPECT_FALSE((*tok)->encode_padded("bad \xff utf-8", 32).ok());
}

}  // namespace
}  // namespace qs
