// golden: `quantserve quantize` on the tiny random Whisper (RTN, int4 g32 sym, as auto_round).
// The output's quantization_config is the dict auto-round 0.16.1's model-free RTN writes for
// this checkpoint (block_name_to_quantize "model.decoder.layers,model.encoder.layers"); every
// block linear of the encoder and decoder is GPTQ-packed and dequantizes to exactly
// formats::rtn_quantize of the source weight; every other tensor and file is the source's; the
// result loads and `transcribe` runs on it. AutoRound, OPT-RTN without audio, other formats,
// --quant_lm_head and a group size that fits no layer are refused with the reason; a group size
// that fits only some layers keeps the others 16-bit and says which.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "audio/whisper_model.h"
#include "core/json.h"
#include "formats/layouts.h"
#include "formats/rtn.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::slurp;

const std::string kModel =
    std::string(QS_SOURCE_DIR) + "/tests/golden/fixtures/whisper/tiny_random";
const std::string kWav = std::string(QS_SOURCE_DIR) + "/tests/golden/fixtures/audio/hello_16k.wav";
const std::string kRtn = " --iters 0 --disable_opt_rtn";

class WhisperQuantize : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("qs_whisper_quantize_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    quantized_ = (dir_ / "w4g32").string();
    auto r = run_cli("quantize --model " + kModel + " --output_dir " + quantized_ + kRtn +
                     " --bits 4 --group_size 32");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    summary_ = r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static fs::path dir_;
  static std::string quantized_;
  static std::string summary_;
};
fs::path WhisperQuantize::dir_;
std::string WhisperQuantize::quantized_;
std::string WhisperQuantize::summary_;

// The module of a block linear's weight ("model.encoder.layers.0.fc1"), or "".
std::string block_linear(const std::string& name, const Tensor& t) {
  const bool in_block =
      name.rfind("model.encoder.layers.", 0) == 0 || name.rfind("model.decoder.layers.", 0) == 0;
  if (!in_block || t.shape.size() != 2 || !name.ends_with(".weight")) return "";
  return name.substr(0, name.size() - 7);
}

TEST_F(WhisperQuantize, WritesWhatAutoRoundWritesAndCarriesTheRest) {
  // 2 encoder layers x 6 linears + 2 decoder layers x 10.
  EXPECT_NE(summary_.find("| 32 | 0 |"), std::string::npos) << summary_;
  // What auto-round 0.16.1 writes for `AutoRound(tiny_random, scheme="W4A16", group_size=32,
  // iters=0, disable_opt_rtn=True).quantize_and_save(format="auto_round")` (model-free).
  const nlohmann::json want = {
      {"quant_method", "auto-round"},
      {"packing_format", "auto_round:auto_gptq"},
      {"bits", 4},
      {"group_size", 32},
      {"sym", true},
      {"data_type", "int"},
      {"iters", 0},
      {"model_free", true},
      {"autoround_version", "0.16.1"},
      {"block_name_to_quantize", "model.decoder.layers,model.encoder.layers"}};
  const auto config = nlohmann::json::parse(slurp(quantized_ + "/config.json"));
  EXPECT_EQ(config["quantization_config"], want);
  EXPECT_EQ(nlohmann::json::parse(slurp(quantized_ + "/quantization_config.json")), want);
  auto source_config = nlohmann::json::parse(slurp(kModel + "/config.json"));
  source_config["quantization_config"] = want;
  EXPECT_EQ(config, source_config);

  auto src = io::Checkpoint::open(kModel);
  auto out = io::Checkpoint::open(quantized_);
  ASSERT_TRUE(src.ok() && out.ok());
  int packed = 0;
  std::set<std::string> written;
  for (const std::string& name : src->names()) {
    const Tensor t = *src->get(name);
    const std::string module = block_linear(name, t);
    if (!module.empty()) {
      EXPECT_FALSE(out->has(name)) << name;
      for (const char* s : {".qweight", ".qzeros", ".scales"}) {
        EXPECT_TRUE(out->has(module + s)) << module << s;
        written.insert(module + s);
      }
      ++packed;
      continue;
    }
    // Convolutions, embeddings, positions, norms and biases: the source's bytes.
    auto o = out->get(name);
    ASSERT_TRUE(o.ok()) << name;
    written.insert(name);
    EXPECT_EQ(o->dtype, t.dtype) << name;
    ASSERT_EQ(o->shape, t.shape) << name;
    EXPECT_EQ(std::memcmp(o->data, t.data, t.nbytes()), 0) << name;
  }
  EXPECT_EQ(packed, 32);
  const std::vector<std::string> names = out->names();
  EXPECT_EQ(written, std::set<std::string>(names.begin(), names.end()));
  for (const char* f : {"generation_config.json", "preprocessor_config.json", "tokenizer.json",
                        "tokenizer_config.json"}) {
    EXPECT_EQ(slurp(quantized_ + "/" + f), slurp(kModel + "/" + f)) << f;
  }
}

// formats::unpack + dequantize of what was written against the source weight RTN-quantized
// here (formats::rtn_quantize, int4 g32 sym) and dequantized: bit for bit.
TEST_F(WhisperQuantize, DequantizedWeightsAreTheRtnOfTheOriginals) {
  auto src = io::Checkpoint::open(kModel);
  auto out = io::Checkpoint::open(quantized_);
  ASSERT_TRUE(src.ok() && out.ok());
  const auto qc = nlohmann::json::parse(slurp(quantized_ + "/quantization_config.json"));
  auto parsed = io::parse_quant_config(qc, "quantization_config");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  int checked = 0;
  for (const std::string& name : src->names()) {
    const Tensor t = *src->get(name);
    const std::string module = block_linear(name, t);
    if (module.empty()) continue;
    const int64_t n = t.shape[0], k = t.shape[1];
    const std::vector<float> w = t.to_f32();
    std::vector<float> want(n * k), got(n * k);
    formats::dequantize(formats::rtn_quantize(w.data(), n, k, 4, 32, true), want.data());
    formats::StoredTensors stored;
    for (const char* s : {"qweight", "qzeros", "scales"}) {
      stored[s] = *out->get(module + "." + s);
    }
    auto q = formats::unpack(module, parsed->scheme_for(module), stored, n, k);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    formats::dequantize(*q, got.data());
    EXPECT_EQ(got, want) << module;
    EXPECT_NE(got, w) << module;  // and quantization did change the weight
    ++checked;
  }
  EXPECT_EQ(checked, 32);
}

TEST_F(WhisperQuantize, LoadsAndTranscribes) {
  auto model = audio::WhisperModel::load(quantized_);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE(model->weights().quantization().quantized());
  auto r =
      run_cli("transcribe --threads 2 --temperature 0 --response-format verbose_json --model " +
                  quantized_ + " " + kWav,
              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto v = nlohmann::json::parse(r.output);
  EXPECT_TRUE(v["text"].is_string());
  EXPECT_GT(v["duration"].get<double>(), 1.0);
}

TEST_F(WhisperQuantize, RefusesWhatItCannotDo) {
  const std::string out = (dir_ / "refused").string();
  const std::string no_autoround = "Whisper is quantized by RTN or OPT-RTN only, not AutoRound";
  for (const auto& [flags, why] : std::vector<std::pair<std::string, std::string>>{
           {"", no_autoround},  // AutoRound (--iters 200)
           // OPT-RTN without calibration audio
           {"--iters 0 --group_size 32", "needs --dataset with audio files"},
           {"--iters 50 --disable_opt_rtn", no_autoround},
           {kRtn + " --group_size 32 --format auto_gptq", "--format auto_round"},
           {kRtn + " --group_size 32 --quant_lm_head", "proj_out"},
           {kRtn + " --scheme W8A8", "compressed-tensors"},
           {kRtn + " --group_size 32 --verify", "scripts/check_whisper_transcribe.py"},
           // in_features are 64 and 96: 128 splits none into whole groups.
           {kRtn + " --group_size 128", "divides the input size of no layer"}}) {
    auto r = run_cli("quantize --model " + kModel + " --output_dir " + out + " " + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.output.find(why), std::string::npos) << flags << ": " << r.output;
  }
  auto again = run_cli("quantize --model " + quantized_ + " --output_dir " + out + kRtn +
                       " --group_size 32");
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("already quantized"), std::string::npos) << again.output;
  EXPECT_FALSE(fs::exists(out));
}

// Group 64 splits the 64-wide inputs but not fc2's 96: the four fc2 stay 16-bit, are listed in
// the summary and in extra_config, and the model still loads and transcribes.
TEST_F(WhisperQuantize, KeepsLayersWithoutWholeGroupsSixteenBit) {
  const std::string out = (dir_ / "g64").string();
  auto r =
      run_cli("quantize --model " + kModel + " --output_dir " + out + kRtn + " --group_size 64");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| 28 | 4 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kept 16-bit (in_features 96 not a multiple of group_size 64): 4 layers"),
            std::string::npos)
      << r.output;
  const auto qc = nlohmann::json::parse(slurp(out + "/quantization_config.json"));
  for (const char* m : {"model.encoder.layers.0.fc2", "model.decoder.layers.1.fc2"}) {
    EXPECT_EQ(qc["extra_config"][m], (nlohmann::json{{"bits", 16}, {"data_type", "fp"}})) << m;
  }
  auto ckpt = io::Checkpoint::open(out);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_TRUE(ckpt->has("model.decoder.layers.0.fc2.weight"));
  EXPECT_TRUE(ckpt->has("model.decoder.layers.0.fc1.qweight"));
  auto t = run_cli("transcribe --threads 2 --model " + out + " " + kWav, false);
  EXPECT_EQ(t.exit_code, 0) << t.output;
}

}  // namespace
}  // namespace qs
