// End-to-end tests of `quantserve inspect`'s multimodal memory table through the built binary:
// on the tiny Qwen2.5-Omni thinker fixture the parts' parameters and bf16 resident bytes equal
// a count by hand from its config.json and the element counts of its safetensors, and the
// W4A16 estimate moves the decoder by exactly what loading a real W4A16 checkpoint of it does;
// on Qwen2.5-Omni-7B's config alone each part's parameters equal what transformers builds from
// it and the total is the published 10.7B.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "io/checkpoint.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;

const std::string kFixtures = std::string(QS_SOURCE_DIR) + "/tests/golden/fixtures/omni";

// inspect --json's parts by name.
std::map<std::string, nlohmann::json> parts_of(const std::string& dir) {
  const CliResult r = run_cli("inspect " + dir + " --json", /*stderr_too=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  std::map<std::string, nlohmann::json> parts;
  for (const auto& p : j.at("multimodal_memory").at("parts")) parts[p["name"]] = p;
  return parts;
}

TEST(InspectMultimodalCli, TinyThinkerMatchesAHandCount) {
  auto parts = parts_of(kFixtures + "/qwen2_5_omni_thinker");
  ASSERT_EQ(parts.size(), 3u);
  // Decoder (vocab 300, hidden 64, 2 layers, q 64 / k, v 32 wide with biases, MLP 96, untied):
  // embedding and lm_head 300 * 64 each, per layer 2 norms + q 4160 + k, v 2080 + o 4096 +
  // 3 * 6144, the final norm.
  EXPECT_EQ(parts["thinker decoder"]["parameters"], 2 * 19200 + 2 * 30976 + 64);
  // bf16: the 2-D weights at 2 bytes, the 576 norm and bias values at 4 (f32 copies).
  EXPECT_EQ(parts["thinker decoder"]["bf16_bytes"], 2 * (2 * 19200 + 2 * 30720) + 4 * 576);
  // Vision (32 wide, 2 blocks, MLP 48, q, k, v apart, merger 128 -> 64): patch embedding
  // 32 * 3 * 2 * 14 * 14, per block 9024, merger 32 + 16512 + 8256.
  EXPECT_EQ(parts["vision tower"]["parameters"], 37632 + 2 * 9024 + 24800);
  EXPECT_EQ(parts["vision tower"]["bf16_bytes"], 2 * (37632 + 2 * 8704 + 24576) + 4 * 864);
  // Audio (128 mels, d 32, 2 layers, FFN 64, output 64): conv1 12320, conv2 3104, per layer
  // 8512, ln_post 64, proj 2112, audio_bos_eos_token 128.
  EXPECT_EQ(parts["audio tower"]["parameters"], 12320 + 3104 + 2 * 8512 + 64 + 2112 + 128);
  // Convolution kernels, norms and biases f32; the linears 16-bit; audio_bos_eos_token not
  // read; the 1500 x 32 f32 sinusoids made at load.
  EXPECT_EQ(parts["audio tower"]["bf16_bytes"], 4 * (12288 + 3072 + 64) + 2 * (2 * 8192) +
                                                    4 * (2 * 320) + 4 * 64 + 2 * 2048 + 4 * 64 +
                                                    1500 * 32 * 4);
  // Towers and their tensor lists agree with what transformers saved.
  auto ckpt = io::Checkpoint::open(kFixtures + "/qwen2_5_omni_thinker");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  std::map<std::string, int64_t> stored;
  for (const std::string& n : ckpt->names()) {
    const int64_t e = ckpt->get(n)->numel();
    stored[n.starts_with("visual.")        ? "vision tower"
           : n.starts_with("audio_tower.") ? "audio tower"
                                           : "thinker decoder"] += e;
  }
  for (const auto& [name, count] : stored) EXPECT_EQ(parts[name]["parameters"], count) << name;
  // Towers stay 16-bit in W4A16.
  EXPECT_EQ(parts["vision tower"]["w4a16_bytes"], parts["vision tower"]["bf16_bytes"]);
  EXPECT_EQ(parts["audio tower"]["w4a16_bytes"], parts["audio tower"]["bf16_bytes"]);
  EXPECT_EQ(parts["thinker decoder"]["w4a16_int4_linears"], 2 * 7);
}

// The estimate's int4 block linears hold what a loaded W4A16 checkpoint of the same config
// holds: make-model writes one (RTN, auto_round int4 g128) and inspect loads it.
TEST(InspectMultimodalCli, W4A16EstimateEqualsALoadedCheckpoint) {
  std::string tmpl = (fs::temp_directory_path() / "qs_inspect_mm_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  const CliResult made =
      run_cli("make-model --config " + kFixtures + "/qwen2_5_omni_thinker/config.json " +
              "--quantize w4g128 --out " + dir + "/w4");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const CliResult r = run_cli("inspect " + dir + "/w4 --json", /*stderr_too=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  int64_t loaded_delta = 0, n_int4 = 0;
  for (const auto& l : j.at("quantization").at("linears")) {
    if (!l["name"].get<std::string>().starts_with("model.layers.")) continue;
    loaded_delta += l["resident_bytes"].get<int64_t>() - l["bf16_bytes"].get<int64_t>();
    n_int4 += l["quantized"].get<bool>() ? 1 : 0;
  }
  nlohmann::json decoder;
  for (const auto& p : j.at("multimodal_memory").at("parts")) {
    if (p["name"] == "thinker decoder") decoder = p;
  }
  ASSERT_FALSE(decoder.is_null());
  EXPECT_EQ(decoder["w4a16_int4_linears"].get<int64_t>(), n_int4);
  EXPECT_EQ(decoder["w4a16_bytes"].get<int64_t>() - decoder["bf16_bytes"].get<int64_t>(),
            loaded_delta);
  fs::remove_all(dir);
}

TEST(InspectMultimodalCli, Omni7BConfigMatchesTransformersAndThePublishedSize) {
  auto parts = parts_of(kFixtures + "/qwen2_5_omni_7b_config");
  ASSERT_EQ(parts.size(), 6u);
  // transformers 5.23's Qwen2_5OmniForConditionalGeneration built from this config on the meta
  // device (named_parameters summed per module; scripts/golden/count_omni_parameters.py).
  EXPECT_EQ(parts["thinker decoder"]["parameters"], 7070619136 + 544997376);
  EXPECT_EQ(parts["vision tower"]["parameters"], 676550144);
  EXPECT_EQ(parts["audio tower"]["parameters"], 639647232);
  EXPECT_EQ(parts["talker"]["parameters"], 1340578688 + 3212160 + 7569408);
  EXPECT_EQ(parts["token2wav DiT"]["parameters"], 333607760);
  EXPECT_EQ(parts["token2wav BigVGAN"]["parameters"], 115443504);
  int64_t total = 0, thinker = 0;
  for (const auto& [name, p] : parts) {
    total += p["parameters"].get<int64_t>();
    if (p["runs_here"].get<bool>()) thinker += p["parameters"].get<int64_t>();
  }
  // The hub's model card: 10.7B parameters (BF16 safetensors); to 0.5 %.
  EXPECT_NEAR(static_cast<double>(total), 10.7e9, 0.005 * 10.7e9);
  // The thinker alone: Qwen2.5-7B's 7.62B decoder plus 1.3B of towers.
  EXPECT_NEAR(static_cast<double>(thinker), 8.93e9, 0.005 * 8.93e9);
  // W4A16: the decoder's 196 block linears int4 (about 0.29 of their bf16 bytes), the
  // embedding and lm_head 16-bit: the decoder drops to about 0.34x; nothing else moves.
  const double ratio = parts["thinker decoder"]["w4a16_bytes"].get<double>() /
                       parts["thinker decoder"]["bf16_bytes"].get<double>();
  EXPECT_GT(ratio, 0.30);
  EXPECT_LT(ratio, 0.40);
  EXPECT_EQ(parts["thinker decoder"]["w4a16_int4_linears"], 28 * 7);
  for (const char* p : {"vision tower", "audio tower", "talker", "token2wav DiT"}) {
    EXPECT_EQ(parts[p]["w4a16_bytes"], parts[p]["bf16_bytes"]) << p;
  }
  EXPECT_FALSE(parts["talker"]["runs_here"].get<bool>());
}

TEST(InspectMultimodalCli, TextTableAndBadConfigs) {
  const CliResult text = run_cli("inspect " + kFixtures + "/qwen2_5_omni_7b_config");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("| talker (not run here) |"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("| **thinker (decoder and towers)** |"), std::string::npos);

  std::string tmpl = (fs::temp_directory_path() / "qs_inspect_bad_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  auto config =
      nlohmann::json::parse(testing::slurp(kFixtures + "/qwen2_5_omni_7b_config/config.json"));
  config["token2wav_config"]["dit_config"].erase("enc_channels");
  std::ofstream(dir + "/config.json") << config.dump();
  const CliResult bad = run_cli("inspect " + dir);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("enc_channels"), std::string::npos) << bad.output;
  config.erase("thinker_config");
  std::ofstream(dir + "/config.json") << config.dump();
  const CliResult no_thinker = run_cli("inspect " + dir);
  EXPECT_EQ(no_thinker.exit_code, 1);
  EXPECT_NE(no_thinker.output.find("thinker_config"), std::string::npos) << no_thinker.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qs
