// golden: Wan's prompt encoding against transformers and diffusers on the three fixture
// pipelines (tests/golden/fixtures/wan, scripts/golden/gen_wan_fixtures.py: a 2-layer UMT5 of
// width 32 with 8 relative-position buckets up to distance 20 in each block): the tokenizer's
// ids and mask, UMT5EncoderModel's last_hidden_state, the embeddings WanPipeline passes on,
// prompt_clean, and the errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/reference_tensors.h"
#include "core/json.h"
#include "diffusion/t5_encoder.h"
#include "diffusion/wan_text.h"
#include "flux_reference.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using testing::expect_close;

const fs::path kWanFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/wan";
const char* const kPipelines[] = {"t2v_a14b", "ti2v_5b", "i2v_a14b"};
constexpr int64_t kLen = 16;  // reference.json max_sequence_length
constexpr int64_t kDim = 32;

// Measured max |ours - transformers| over umt5_hidden and umt5_embeds of all three pipelines
// and the masked prompt below (values up to 3.3): 1.1e-6 with the AVX-512 kernels, 1.5e-6 with
// AVX2's, 1.2e-6 with the scalar reference (QS_KERNEL=avx512/avx2/ref).
constexpr float kAtol = 5e-6f;

std::vector<std::string> reference_prompts(const fs::path& fixture) {
  auto j = read_json((fixture / "reference.json").string());
  QS_CHECK_MSG(j.ok(), j.status().to_string().c_str());
  return (*j)["prompts"].get<std::vector<std::string>>();
}

template <typename T>
std::vector<T> row(const std::vector<T>& all, size_t i, size_t n) {
  return std::vector<T>(all.begin() + i * n, all.begin() + (i + 1) * n);
}

TEST(WanTextEncoder, TokensMatchTransformers) {
  for (const char* name : kPipelines) {
    SCOPED_TRACE(name);
    testing::ReferenceTensors ref(kWanFixtures / name / "reference.safetensors");
    auto enc = diffusion::WanTextEncoder::load((kWanFixtures / name / "pipeline").string());
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    EXPECT_EQ(enc->hidden_size(), kDim);
    const auto prompts = reference_prompts(kWanFixtures / name);
    ASSERT_EQ(prompts.size(), 3u);
    const auto ids = ref.i32("umt5_ids"), mask = ref.i32("umt5_mask");
    for (size_t p = 0; p < prompts.size(); ++p) {
      auto t = enc->tokenize(prompts[p], kLen);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      EXPECT_EQ(t->ids, row(ids, p, kLen)) << p;
      std::vector<int32_t> our_mask(kLen);
      for (int64_t j = 0; j < kLen; ++j) our_mask[j] = j < t->n_valid;
      EXPECT_EQ(our_mask, row(mask, p, kLen)) << p;
    }
  }
}

TEST(WanTextEncoder, Umt5HiddenAndEmbedsMatchTransformers) {
  ThreadPool pool(2);
  for (const char* name : kPipelines) {
    SCOPED_TRACE(name);
    testing::ReferenceTensors ref(kWanFixtures / name / "reference.safetensors");
    auto enc = diffusion::WanTextEncoder::load((kWanFixtures / name / "pipeline").string());
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    EXPECT_EQ(enc->encoder().config().model_type, "umt5");
    const auto prompts = reference_prompts(kWanFixtures / name);
    const auto ids = ref.i32("umt5_ids"), mask = ref.i32("umt5_mask");
    const auto hidden = ref.f32("umt5_hidden"), embeds = ref.f32("umt5_embeds");
    for (size_t p = 0; p < prompts.size(); ++p) {
      const std::string what = std::string(name) + " prompt " + std::to_string(p);
      int64_t n_valid = 0;
      for (int64_t j = 0; j < kLen; ++j) n_valid += mask[p * kLen + j];
      std::vector<float> h;
      ASSERT_TRUE(enc->encoder().forward(row(ids, p, kLen), n_valid, &h, pool).ok());
      expect_close(h, row(hidden, p, kLen * kDim), kAtol, 0, what + " hidden");
      auto e = enc->encode(prompts[p], kLen, pool);
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      expect_close(*e, row(embeds, p, kLen * kDim), kAtol, 0, what + " embeds");
      // The third prompt ("a cat") is shorter than kLen: its padding is masked out of the
      // attention and its rows past the prompt are exactly zero, as the pipeline passes them.
      if (p == 2) {
        EXPECT_LT(n_valid, kLen);
        for (size_t i = static_cast<size_t>(n_valid * kDim); i < e->size(); ++i)
          ASSERT_EQ((*e)[i], 0.0f) << i;
      }
    }
  }
}

TEST(WanTextEncoder, PromptCleanAsDiffusers) {
  // Expected: diffusers 0.42.1's pipeline_wan.prompt_clean with ftfy 6.3.1 installed
  // (Python 3.11), on the same strings; the last case is bytes that are not UTF-8, which
  // Python would first decode with errors="replace".
  const std::pair<std::string, std::string> cases[] = {
      {"  a photo\tof a\n\ncat  "s, "a photo of a cat"s},
      {"&amp;lt;b&amp;gt;bold&amp;lt;/b&amp;gt;"s, "<b>bold</b>"s},
      {"&amp;amp;amp;lt;"s, "<"s},
      {"<i>x</i> &amp;amp;amp;lt;"s, "<i>x</i> &amp;lt;"s},
      {"a &amp;amp;amp; b\n<c> &amp;amp;amp; d"s, "a & b <c> &amp; d"s},
      {"x &amp;amp;amp; y\r\nz &amp;amp;amp; w"s, "x & y z & w"s},
      {"&#65;&#x42;&#X43;&#68 &#128512; [&#0;] [&#x80;] [&#1;] [&#xD800;] [&#99999999999;] [&#13;]"s,
       "ABCD \U0001f600 [\ufffd] [\u20ac] [] [\ufffd] [\ufffd] [ ]"s},
      {"&#59; &#12ab; &#xZZ; &#; &# x"s, "; ab; &#xZZ; &#; &# x"s},
      {"AT&amp;T &copy 2024 &notit; &ltimes; caf&eacute; &EACUTE; STRA&SZLIG;E &nbsp;x&nbspy"s,
       "AT&T \u00a9 2024 \u00acit; \u22c9 caf\u00e9 \u00c9 STRASSE x y"s},
      {"&alpha &alpha; &ALPHA; &lang;x&rang; &hellip;&mdash;&trade;&euro; &apos;q&apos; &quot;Q&QUOT;"s,
       "&alpha \u03b1 \u0391 \u27e8x\u27e9 \u2026\u2014\u2122\u20ac 'q' \"Q\""s},
      {"\u201cHello\u201d \u2018world\u2019 \ufb01ne \ufb03x \u0149 \uff2c\uff2f\uff35\uff24\u3000\uff2e\uff2f\uff29\uff33\uff25\uff33 \uff76\uff9e"s,
       "\"Hello\" 'world' fine ffix 'n LOUD NOISES \u30ac"s},
      {"\033[31mred\033[0m\007 bell\u00a0nbsp\u2003em\u200bzw \ufeffbom \000nul"s,
       "red bell nbsp em\u200bzw bom nul"s},
      {"cafe\u0301 \u00e9 \ufffe x\u0085y \u0091q\u0092"s, "caf\u00e9 \u00e9 \ufffe x\u2026y 'q'"s},
      {"line1\u2028line2\u2029line3\rline4"s, "line1 line2 line3 line4"s},
      {"   \t\n  "s, ""s},
      {""s, ""s},
      {"a photograph of an astronaut riding a horse"s,
       "a photograph of an astronaut riding a horse"s},
      {"A Cat wearing a small hat, studio lighting!"s,
       "A Cat wearing a small hat, studio lighting!"s},
      {"&lt;&amp;gt;"s, "<>"s},
      {"&amp;#60;b&amp;#x3e;"s, "<b>"s},
      {"&checkmark &ampx &amp &lt3 &AMP; &unknown;"s, "&checkmark &x & <3 & &unknown;"s},
      {"a\377b"s, "a\ufffdb"s},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(diffusion::wan_prompt_clean(in), want) << in;
}

// A pipeline folder under the temporary directory whose tokenizer/ and text_encoder/ are
// copies (either left out when its source is empty).
fs::path scratch_pipeline(const std::string& name, const fs::path& tokenizer,
                          const fs::path& text_encoder) {
  const fs::path dir = fs::temp_directory_path() / ("qs_wan_text_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (!tokenizer.empty()) fs::copy(tokenizer, dir / "tokenizer", fs::copy_options::recursive);
  if (!text_encoder.empty()) {
    fs::copy(text_encoder, dir / "text_encoder", fs::copy_options::recursive);
  }
  return dir;
}

void edit_config(const fs::path& text_encoder, const std::string& key, const nlohmann::json& v) {
  const fs::path file = text_encoder / "config.json";
  auto j = read_json(file.string());
  QS_CHECK_MSG(j.ok(), j.status().to_string().c_str());
  (*j)[key] = v;
  std::ofstream(file) << j->dump(2);
}

TEST(WanTextEncoder, Errors) {
  const fs::path wan = kWanFixtures / "t2v_a14b/pipeline";
  auto missing_te =
      diffusion::WanTextEncoder::load(scratch_pipeline("no_te", wan / "tokenizer", {}).string());
  ASSERT_FALSE(missing_te.ok());
  EXPECT_NE(missing_te.status().message().find("text_encoder"), std::string::npos)
      << missing_te.status().to_string();
  auto missing_tok = diffusion::WanTextEncoder::load(
      scratch_pipeline("no_tok", {}, wan / "text_encoder").string());
  ASSERT_FALSE(missing_tok.ok());
  EXPECT_NE(missing_tok.status().message().find("tokenizer"), std::string::npos)
      << missing_tok.status().to_string();

  // FLUX's T5 (model_type "t5") loads as a T5Encoder but is no Wan text encoder.
  auto t5 = diffusion::WanTextEncoder::load(
      scratch_pipeline("t5", wan / "tokenizer", fs::path(testing::kFluxPipeline) / "text_encoder_2")
          .string());
  ASSERT_FALSE(t5.ok());
  EXPECT_NE(t5.status().message().find("model_type \"t5\""), std::string::npos)
      << t5.status().to_string();
  const fs::path mt5 = scratch_pipeline("mt5", wan / "tokenizer", wan / "text_encoder");
  edit_config(mt5 / "text_encoder", "model_type", "mt5");
  auto mt5_enc = diffusion::WanTextEncoder::load(mt5.string());
  ASSERT_FALSE(mt5_enc.ok());
  EXPECT_NE(mt5_enc.status().message().find("mt5"), std::string::npos);
  const fs::path act = scratch_pipeline("act", wan / "tokenizer", wan / "text_encoder");
  edit_config(act / "text_encoder", "dense_act_fn", "relu");
  auto act_enc = diffusion::WanTextEncoder::load(act.string());
  ASSERT_FALSE(act_enc.ok());
  EXPECT_NE(act_enc.status().message().find("dense_act_fn"), std::string::npos)
      << act_enc.status().to_string();
  // A UMT5 whose second block lacks its bias table.
  const fs::path no_bias = scratch_pipeline("no_bias", wan / "tokenizer", {});
  fs::create_directories(no_bias / "text_encoder");
  fs::copy(wan / "text_encoder/config.json", no_bias / "text_encoder/config.json");
  edit_config(no_bias / "text_encoder", "num_layers", 3);
  fs::copy(wan / "text_encoder/model.safetensors", no_bias / "text_encoder/model.safetensors");
  auto no_bias_enc = diffusion::WanTextEncoder::load(no_bias.string());
  ASSERT_FALSE(no_bias_enc.ok());
  EXPECT_NE(no_bias_enc.status().message().find("encoder.block.2."), std::string::npos)
      << no_bias_enc.status().to_string();

  auto enc = diffusion::WanTextEncoder::load(wan.string());
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  ThreadPool pool(2);
  for (int64_t len : {int64_t{0}, int64_t{-3}, int64_t{4097}}) {
    auto e = enc->encode("a cat", len, pool);
    ASSERT_FALSE(e.ok()) << len;
    EXPECT_NE(e.status().message().find("max_sequence_length"), std::string::npos);
  }
  EXPECT_TRUE(enc->tokenize("a cat", 4096).ok());
  EXPECT_TRUE(enc->tokenize("a cat", 1).ok());
  EXPECT_FALSE(
      enc->tokenize(std::string(diffusion::WanTextEncoder::kMaxPromptBytes + 1, 'a'), 16).ok());
  std::vector<float> h;
  const std::vector<int32_t> ids = {4, 3, 2, 1};
  EXPECT_FALSE(enc->encoder().forward(ids, 0, &h, pool).ok());
  EXPECT_FALSE(enc->encoder().forward(ids, 5, &h, pool).ok());
  EXPECT_TRUE(enc->encoder().forward(ids, 4, &h, pool).ok());
  for (const fs::path& dir : {mt5, act, no_bias}) fs::remove_all(dir);
  for (const char* name : {"no_te", "no_tok", "t5"}) {
    fs::remove_all(fs::temp_directory_path() / ("qs_wan_text_"s + name));
  }
}

// max_sequence_length 1 keeps only "</s>"; a long prompt is cut to max_sequence_length - 1
// tokens before it, as the tokenizer's truncation does (ids as transformers gives them).
TEST(WanTextEncoder, TruncatesAsTransformers) {
  auto enc = diffusion::WanTextEncoder::load((kWanFixtures / "t2v_a14b/pipeline").string());
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  auto one = enc->tokenize("a photograph of an astronaut riding a horse", 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->ids, std::vector<int32_t>{1});
  EXPECT_EQ(one->n_valid, 1);
  auto four = enc->tokenize("a photograph of an astronaut riding a horse", 4);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->ids, (std::vector<int32_t>{4, 58, 62, 1}));
  EXPECT_EQ(four->n_valid, 4);
}

}  // namespace
}  // namespace qs
