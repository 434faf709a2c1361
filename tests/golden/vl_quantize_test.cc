// golden: `quantserve quantize` (quant::quantize, the command's body) on the tiny Qwen2.5-VL and
// Qwen2.5-Omni thinker fixtures against what the real auto-round 0.16.1 wrote for the same
// settings (tests/golden/fixtures/vl_autoround/<model>_tool.json, made by
// scripts/golden/gen_vl_autoround_fixture.py). RTN (--iters 0 --disable_opt_rtn, the tool's
// model-free mode): the same tensor names, dtypes and shapes, the same quantization_config and
// the same packed codes, scales and zeros. AutoRound (text calibration from the tool's token
// ids): the same tensors and quantization_config keys (the tool's extra_config names, mangled by
// a second '^', read back as the plain names), block 0's loss at iteration 0 equals the tool's
// (so the decoder block the tuner runs is the tool's, M-RoPE on text included), and the result
// loads. Both modes copy the towers' tensors and the tokenizer, processor and generation files
// unchanged. Quantizing a tower and formats that cannot keep the towers 16-bit are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "quant/pipeline.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const fs::path kFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures";
const fs::path kTool = kFixtures / "vl_autoround";

fs::path source_dir(const std::string& model) {
  return model == "qwen2_5_vl" ? kFixtures / "vl/qwen2_5_vl"
                               : kFixtures / "omni/qwen2_5_omni_thinker";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// name -> [dtype, shape], as the generator lists the tool's tensors.
json tensor_list(const io::Checkpoint& ckpt) {
  json out = json::object();
  for (const std::string& name : ckpt.names()) {
    const Tensor t = *ckpt.get(name);
    out[name] = {dtype_name(t.dtype), t.shape};
  }
  return out;
}

// The tool's in-process run writes extra_config keys such as
// "^model\.language_model\.^model\.visual\.blocks\.0\.mlp\.up_proj.*" for the checkpoint's
// "visual.blocks.0.mlp.up_proj": the name after the last '^', unescaped, without ".*" and
// without transformers' "model." in front of the tower.
std::string plain_name(std::string key) {
  key = key.substr(key.rfind('^') + 1);
  if (key.ends_with(".*")) key.resize(key.size() - 2);
  key = std::regex_replace(key, std::regex(R"(\\\.)"), ".");
  if (key.rfind("model.visual.", 0) == 0) key = key.substr(6);
  return key;
}

class VlQuantize : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_vl_quantize_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    std::ifstream in(kTool / (GetParam() + "_tool.json"));
    tool_ = json::parse(in);
    options_.model_dir = source_dir(GetParam()).string();
    options_.output_dir = dir_ + "/out";
    options_.spec.bits = 4;
    options_.spec.group_size = 32;
    options_.spec.sym = true;
    options_.format = io::ExportFormat::kAutoRound;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Everything the export does not quantize is the source's, byte for byte: the towers, the
  // embeddings, norms, biases and lm_head; and so are the tokenizer, processor and generation
  // files.
  void expect_carried_over(const io::Checkpoint& out) {
    auto src = io::Checkpoint::open(options_.model_dir);
    ASSERT_TRUE(src.ok());
    int n_same = 0;
    for (const std::string& name : src->names()) {
      if (!out.has(name)) continue;  // a quantized linear's weight
      const Tensor a = *src->get(name), b = *out.get(name);
      ASSERT_EQ(a.shape, b.shape) << name;
      ASSERT_EQ(a.dtype, b.dtype) << name;
      EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << name;
      ++n_same;
    }
    EXPECT_EQ(n_same, static_cast<int>(src->names().size()) - 14);
    for (const auto& e : fs::directory_iterator(options_.model_dir)) {
      const std::string name = e.path().filename().string();
      if (name == "config.json" || name.ends_with(".safetensors")) continue;
      ASSERT_TRUE(fs::exists(fs::path(options_.output_dir) / name)) << name;
      EXPECT_EQ(slurp(e.path()), slurp(fs::path(options_.output_dir) / name)) << name;
    }
  }

  std::string dir_;
  json tool_;
  quant::QuantizeOptions options_;
};

TEST_P(VlQuantize, RtnWritesWhatTheToolWrites) {
  options_.iters = 0;
  options_.disable_opt_rtn = true;
  auto summary = quant::quantize(options_, {}, {});
  ASSERT_TRUE(summary.ok()) << summary.status().to_string();
  EXPECT_EQ(summary->n_quantized, 14);
  auto out = io::Checkpoint::open(options_.output_dir);
  ASSERT_TRUE(out.ok());
  const json& want = tool_["rtn"];
  EXPECT_EQ(tensor_list(*out), want["tensors"]);
  auto config = read_json(options_.output_dir + "/config.json");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ((*config)["quantization_config"], want["quantization_config"]);
  auto qc_file = read_json(options_.output_dir + "/quantization_config.json");
  ASSERT_TRUE(qc_file.ok());
  EXPECT_EQ(*qc_file, want["quantization_config"]);
  expect_carried_over(*out);

  // The packed tensors, code for code. GPTQ layout (auto_round:auto_gptq): qweight [k / 8, n]
  // int32 holds input 8 r + p of output j in nibble p of word (r, j), scales [k / 32, n] f16,
  // zero 8 (stored as 7). Scales and zeros must be identical; a code may differ only by one
  // step where w / scale + 8 lies at a half-way point (up to f32 noise), which the tool and we
  // round to different neighbours, as known for the text models.
  auto packed = io::Checkpoint::open(kTool.string(), GetParam() + "_rtn_packed");
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  auto src = io::Checkpoint::open(options_.model_dir);
  ASSERT_TRUE(src.ok());
  int64_t codes = 0, codes_off = 0, others_off = 0;
  for (const std::string& name : packed->names()) {
    const Tensor a = *packed->get(name), b = *out->get(name);
    ASSERT_EQ(a.shape, b.shape) << name;
    ASSERT_EQ(a.dtype, b.dtype) << name;
    if (!name.ends_with(".qweight")) {
      others_off += std::memcmp(a.data, b.data, a.nbytes()) != 0;
      continue;
    }
    const std::string module = name.substr(0, name.size() - 8);
    const std::vector<float> w = src->get(module + ".weight")->to_f32();
    const std::vector<float> scales = out->get(module + ".scales")->to_f32();
    const int64_t n = a.dim(1), k = a.dim(0) * 8;
    const int32_t* qa = a.ptr<int32_t>();
    const int32_t* qb = b.ptr<int32_t>();
    for (int64_t r = 0; r < k / 8; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        for (int p = 0; p < 8; ++p) {
          ++codes;
          const int ca = (static_cast<uint32_t>(qa[r * n + j]) >> (4 * p)) & 15;
          const int cb = (static_cast<uint32_t>(qb[r * n + j]) >> (4 * p)) & 15;
          if (ca == cb) continue;
          ++codes_off;
          const int64_t in = 8 * r + p;
          const double x = w[j * k + in] / scales[(in / 32) * n + j] + 8.0;
          EXPECT_EQ(std::abs(ca - cb), 1) << name << " [" << j << ", " << in << "]";
          // Within 5e-3: both tools round against the f32 scale, which the f16 we read here
          // moves by up to 2^-11 relative, i.e. up to 8 * 2^-11 = 4e-3 code units.
          EXPECT_NEAR(std::fabs(x - std::floor(x)), 0.5, 5e-3)
              << name << " [" << j << ", " << in << "]: w / scale + 8 = " << x
              << " is no half-way point";
        }
      }
    }
  }
  std::printf(
      "%s RTN: %lld of %lld int4 codes differ from the tool's, each at a half-way point; %lld "
      "scale/zero tensors differ\n",
      GetParam().c_str(), static_cast<long long>(codes_off), static_cast<long long>(codes),
      static_cast<long long>(others_off));
  EXPECT_EQ(codes, 61440);  // 2 layers x (64 x 64 x 2 + 32 x 64 x 2 + 96 x 64 x 3)
  EXPECT_LT(codes_off, codes / 1000);
  EXPECT_EQ(others_off, 0);
}

TEST_P(VlQuantize, AutoRoundWritesTheToolsKeysAndTunesTheDecoderOnText) {
  std::ifstream in(kTool / "reference.json");
  const json settings = json::parse(in)["settings"];
  options_.iters = settings["iters"].get<int64_t>();
  options_.nsamples = settings["nsamples"].get<int64_t>();
  options_.seqlen = settings["seqlen"].get<int64_t>();
  options_.batch_size = settings["batch_size"].get<int64_t>();
  options_.amp = settings["amp"].get<bool>();
  options_.seed = settings["seed"].get<uint64_t>();
  options_.dataset = (kTool / (GetParam() + "_calibration.jsonl")).string();
  options_.threads = 2;
  std::vector<quant::BlockReport> blocks;
  auto summary = quant::quantize(options_, {}, {}, [&](const quant::BlockReport& b) {
    if (b.done) blocks.push_back(b);
  });
  ASSERT_TRUE(summary.ok()) << summary.status().to_string();
  EXPECT_EQ(summary->n_quantized, 14);
  auto out = io::Checkpoint::open(options_.output_dir);
  ASSERT_TRUE(out.ok());
  const json& want = tool_["autoround"];
  EXPECT_EQ(tensor_list(*out), want["tensors"]);
  auto config = read_json(options_.output_dir + "/config.json");
  ASSERT_TRUE(config.ok());
  json ours = (*config)["quantization_config"];
  json theirs = want["quantization_config"];
  json plain = json::object();
  for (const auto& [key, value] : theirs["extra_config"].items()) plain[plain_name(key)] = value;
  theirs["extra_config"] = plain;
  EXPECT_EQ(ours, theirs);
  expect_carried_over(*out);

  // Block 0 sees the embeddings of the same tokens in both tools, so its loss at iteration 0
  // (RTN weights) must be of the tool's size: a coarse check (a wrong scale, or a block that
  // is not the decoder's, is off by far more). Measured: within 0.4% (VL) and 0.9% (Omni); the
  // remaining gap is not explained yet (the tool's MLLM path may mask positions differently).
  ASSERT_EQ(blocks.size(), 2u);
  const double tool_initial = want["block_losses"][0]["initial_raw"].get<double>();
  std::printf("%s block 0 loss at iteration 0: ours %.6g, the tool's %.4g (best: ours %.6g)\n",
              GetParam().c_str(), blocks[0].initial_loss, tool_initial, blocks[0].best_loss);
  EXPECT_NEAR(blocks[0].initial_loss, tool_initial, 0.02 * tool_initial);
  EXPECT_LE(blocks[0].best_loss, blocks[0].initial_loss);

  auto model = models::Model::load(options_.output_dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  int n_quantized = 0;
  for (const models::LinearInfo& info : (*model)->linears()) n_quantized += info.scheme.quantized();
  EXPECT_EQ(n_quantized, 14);
}

TEST_P(VlQuantize, RefusesTowersAndFormatsThatCannotKeepThem16Bit) {
  options_.iters = 0;
  options_.disable_opt_rtn = true;
  options_.layer_config = {{"visual.blocks.0.attn.proj", "W8A16"}};
  auto r = quant::quantize(options_, {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tower"), std::string::npos) << r.status().message();
  options_.layer_config = {{"merger", {{"bits", 8}}}};
  r = quant::quantize(options_, {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tower"), std::string::npos) << r.status().message();
  options_.layer_config = json::object();
  options_.format = io::ExportFormat::kAutoGptq;
  r = quant::quantize(options_, {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("auto_round"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(options_.output_dir));
  // A decoder layer in --layer_config is still honoured.
  options_.format = io::ExportFormat::kAutoRound;
  options_.layer_config = {{"model.layers.1.mlp.down_proj", "16"}};
  auto ok = quant::quantize(options_, {}, {});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->n_quantized, 13);
}

INSTANTIATE_TEST_SUITE_P(Models, VlQuantize,
                         ::testing::Values("qwen2_5_vl", "qwen2_5_omni_thinker"));

}  // namespace
}  // namespace qs
