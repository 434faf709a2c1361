// golden: `quantserve import ct2` against the fixture of scripts/golden/gen_ct2_fixture.py: a
// random transformers WhisperForConditionalGeneration (float16) that CTranslate2's own
// converter turned into model.bin, as is and int8-quantized. Imported back, every tensor must
// be the transformers tensor bit for bit (int8: within half a quantization step of its row),
// and config.json / generation_config.json must hold what transformers saved.
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "../common/cli.h"
#include "core/json.h"
#include "importers/ct2_whisper_import.h"
#include "io/checkpoint.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/ct2/whisper_tiny_random";

fs::path fresh_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("qs_ct2_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

fs::path import_fixture(const std::string& sub, const std::string& tag) {
  const fs::path out = fresh_dir(tag);
  const Status s = importers::import_ct2_whisper((kFixture / sub).string(), out.string(), {});
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

nlohmann::json json_of(const fs::path& p) {
  auto j = read_json(p.string());
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  return j.ok() ? *j : nlohmann::json();
}

TEST(Ct2Import, EveryTensorIsTheTransformersTensor) {
  const fs::path out = import_fixture("ct2", "f16");
  auto ours = io::Checkpoint::open(out.string());
  auto ref = io::Checkpoint::open((kFixture / "hf").string());
  ASSERT_TRUE(ours.ok()) << ours.status().to_string();
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  // proj_out is tied to embed_tokens: transformers stores neither twice.
  ASSERT_EQ(ours->names(), ref->names());
  for (const std::string& name : ref->names()) {
    const Tensor a = *ours->get(name), b = *ref->get(name);
    ASSERT_EQ(a.dtype, b.dtype) << name;
    ASSERT_EQ(a.shape, b.shape) << name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << name;
  }
  fs::remove_all(out);
}

TEST(Ct2Import, ConfigsHoldWhatTransformersSaved) {
  const fs::path out = import_fixture("ct2", "config");
  const nlohmann::json ours = json_of(out / "config.json"),
                       ref = json_of(kFixture / "hf/config.json");
  for (const char* key : {"architectures",
                          "model_type",
                          "vocab_size",
                          "num_mel_bins",
                          "d_model",
                          "encoder_layers",
                          "decoder_layers",
                          "encoder_attention_heads",
                          "decoder_attention_heads",
                          "encoder_ffn_dim",
                          "decoder_ffn_dim",
                          "max_source_positions",
                          "max_target_positions",
                          "activation_function",
                          "scale_embedding",
                          "tie_word_embeddings",
                          "bos_token_id",
                          "eos_token_id",
                          "pad_token_id",
                          "decoder_start_token_id",
                          "suppress_tokens",
                          "begin_suppress_tokens",
                          "is_encoder_decoder"}) {
    EXPECT_EQ(ours[key], ref[key]) << key;
  }
  EXPECT_EQ(ours["torch_dtype"], ref["dtype"]);

  const nlohmann::json gen = json_of(out / "generation_config.json");
  const nlohmann::json ref_gen = json_of(kFixture / "hf/generation_config.json");
  for (const char* key :
       {"alignment_heads", "begin_suppress_tokens", "suppress_tokens", "bos_token_id",
        "decoder_start_token_id", "eos_token_id", "pad_token_id", "forced_decoder_ids",
        "is_multilingual", "max_initial_timestamp_index", "max_length", "no_timestamps_token_id",
        "prev_sot_token_id", "return_timestamps"}) {
    EXPECT_EQ(gen[key], ref_gen[key]) << key;
  }
  EXPECT_FALSE(gen.contains("lang_to_id"));

  EXPECT_EQ(json_of(out / "preprocessor_config.json")["feature_size"], ref["num_mel_bins"]);
  EXPECT_EQ(testing::slurp((out / "tokenizer.json").string()),
            testing::slurp((kFixture / "ct2/tokenizer.json").string()));
  EXPECT_EQ(json_of(out / "tokenizer_config.json")["tokenizer_class"], "WhisperTokenizer");
  fs::remove_all(out);
}

// CTranslate2 stores round(w * 127 / max|row|): dequantized, each weight is within half a
// step of its row of the original; the float tensors stay exact.
TEST(Ct2Import, Int8WeightsDequantizeWithinHalfAStep) {
  const fs::path out = import_fixture("ct2_int8", "int8");
  auto ours = io::Checkpoint::open(out.string());
  auto ref = io::Checkpoint::open((kFixture / "hf").string());
  ASSERT_TRUE(ours.ok() && ref.ok());
  ASSERT_EQ(ours->names(), ref->names());
  for (const std::string& name : ref->names()) {
    const Tensor a = *ours->get(name), b = *ref->get(name);
    ASSERT_EQ(a.dtype, DType::kF16) << name;  // int8_float16 keeps f16 for the rest
    ASSERT_EQ(a.shape, b.shape) << name;
    const std::vector<float> x = a.to_f32(), r = b.to_f32();
    const int64_t rows = b.shape[0], cols = b.numel() / rows;
    for (int64_t i = 0; i < rows; ++i) {
      float amax = 0;
      for (int64_t j = 0; j < cols; ++j) amax = std::max(amax, std::fabs(r[i * cols + j]));
      for (int64_t j = 0; j < cols; ++j) {
        const float ref_v = r[i * cols + j];
        // half a step, then the f16 rounding of the dequantized value
        const float tol = 0.5f * amax / 127 * 1.001f + std::fabs(ref_v) * 1e-3f;
        ASSERT_NEAR(x[i * cols + j], ref_v, tol) << name << " [" << i << ", " << j << "]";
      }
    }
  }
  fs::remove_all(out);
}

TEST(Ct2Import, CliWritesTheAskedDtype) {
  const fs::path out = fresh_dir("cli");
  const auto r = testing::run_cli("import ct2 --model " + (kFixture / "ct2").string() + " --out " +
                                  out.string() + " --dtype f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_of(out / "config.json")["torch_dtype"], "float32");
  auto ours = io::Checkpoint::open(out.string());
  auto ref = io::Checkpoint::open((kFixture / "hf").string());
  ASSERT_TRUE(ours.ok() && ref.ok());
  const Tensor a = *ours->get("model.decoder.embed_tokens.weight");
  const Tensor b = *ref->get("model.decoder.embed_tokens.weight");
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.to_f32(), b.to_f32());

  const auto bad = testing::run_cli("import ct2 --model " + (kFixture / "ct2").string() +
                                    " --out " + out.string() + " --dtype f8");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--dtype must be f16, bf16 or f32"), std::string::npos) << bad.output;
  const auto missing = testing::run_cli("import ct2 --model /nonexistent --out " + out.string());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("/nonexistent/model.bin"), std::string::npos) << missing.output;
  fs::remove_all(out);
}

}  // namespace
}  // namespace qs
