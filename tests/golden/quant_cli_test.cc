// End-to-end tests of the quantized-checkpoint CLI through the built binary, on a tiny Llama
// config: `make-model --quantize` writes a reproducible AutoRound / GPTQ / AWQ /
// compressed-tensors checkpoint whose layers decode (through the loader's own detection and
// formats path) to the RTN of the unquantized model of the same seed; `inspect` reports the
// method, a kernel per layer and logical parameter counts; `--quantization` is checked against
// the checkpoint; `generate` and `bench latency` run on it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "core/json.h"
#include "formats/layouts.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"
#include "io/quant_export.h"
#include "models/model.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::CliResult;
using testing::run_cli;
using testing::slurp;

class QuantCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_quant_cli_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Every dimension a multiple of 32 (AutoRound packs only those), untied so that lm_head
    // is a linear of its own that must stay 16-bit; vocab 512 fits stories260K's tokenizer.
    json config = {{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"hidden_size", 64},
                   {"intermediate_size", 128},
                   {"num_hidden_layers", 2},
                   {"num_attention_heads", 4},
                   {"num_key_value_heads", 2},
                   {"vocab_size", 512},
                   {"max_position_embeddings", 128},
                   {"rms_norm_eps", 1e-5},
                   {"rope_theta", 10000.0},
                   {"tie_word_embeddings", false},
                   {"bos_token_id", 1},
                   {"eos_token_id", 2}};
    std::ofstream(dir_ + "/tiny.json") << config.dump();
    // 80 is not a multiple of 32: the MLP linears stay 16-bit, listed in each format's way.
    config["intermediate_size"] = 80;
    std::ofstream(dir_ + "/tiny80.json") << config.dump();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // make-model into dir_/<out>; asserts success.
  void make(const std::string& out, const std::string& extra, const std::string& cfg = "tiny") {
    CliResult r = run_cli("make-model --config " + dir_ + "/" + cfg + ".json --seed 3 --out " +
                          dir_ + "/" + out + " " + extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }

  std::string dir_;
};

// Checks that module `module` of the checkpoint in `qdir`, decoded the way the loader decodes
// it (detected config -> scheme -> formats::unpack), is the RTN of the same module's weight in
// the unquantized checkpoint `ref_dir`: every value within one step of its group's scale.
void expect_rtn_of(const std::string& qdir, const std::string& ref_dir, const std::string& module,
                   formats::Layout layout, int bits, bool sym) {
  SCOPED_TRACE(qdir + " " + module);
  auto config = read_json(qdir + "/config.json");
  ASSERT_TRUE(config.ok());
  auto quant = io::load_quant_config(qdir, *config);
  ASSERT_TRUE(quant.ok()) << quant.status().to_string();
  const formats::QuantScheme scheme = quant->scheme_for(module);
  EXPECT_EQ(scheme.layout, layout);
  EXPECT_EQ(scheme.bits, bits);
  EXPECT_EQ(scheme.sym, sym);
  auto ckpt = io::Checkpoint::open(qdir);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_FALSE(ckpt->has(module + ".weight"));
  formats::StoredTensors stored;
  for (const auto& name : ckpt->names()) {
    if (name.rfind(module + ".", 0) == 0) stored[name.substr(module.size() + 1)] = *ckpt->get(name);
  }
  auto ref = io::Checkpoint::open(ref_dir);
  ASSERT_TRUE(ref.ok());
  auto w = ref->get(module + ".weight");
  ASSERT_TRUE(w.ok());
  const int64_t n = w->dim(0), k = w->dim(1);
  auto q = formats::unpack(module, scheme, stored, n, k);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  std::vector<float> deq(n * k);
  formats::dequantize(*q, deq.data());
  const std::vector<float> orig = w->to_f32();
  int64_t bad = 0;
  float max_err = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const float s = std::fabs(q->scales[r * q->n_groups() + q->group_of(c)]);
      const float err = std::fabs(deq[r * k + c] - orig[r * k + c]);
      max_err = std::max(max_err, err);
      // Round-to-nearest is within half a step; the clamped end of full-range sym is within one.
      if (err > 1.001f * s) ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << "max error " << max_err;
  EXPECT_GT(max_err, 0.0f);  // it really is quantized
}

TEST_F(QuantCli, QuantizedCheckpointIsReproducibleAndIsTheRtnOfTheSameSeed) {
  make("bf16", "");
  make("a", "--quantize w4g32");
  make("b", "--quantize w4g32");
  CliResult c = run_cli("make-model --config " + dir_ + "/tiny.json --seed 4 --quantize w4g32 " +
                        "--out " + dir_ + "/c");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  for (const char* file : {"model.safetensors", "config.json", "quantization_config.json"}) {
    EXPECT_EQ(slurp(dir_ + "/a/" + file), slurp(dir_ + "/b/" + file)) << file;
  }
  EXPECT_NE(slurp(dir_ + "/a/model.safetensors"), slurp(dir_ + "/c/model.safetensors"));

  const json config = json::parse(slurp(dir_ + "/a/config.json"));
  const json& qc = config["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "auto-round");
  EXPECT_EQ(qc["packing_format"], "auto_round:auto_gptq");
  EXPECT_EQ(qc["bits"], 4);
  EXPECT_EQ(qc["group_size"], 32);
  EXPECT_EQ(qc["sym"], true);
  EXPECT_EQ(qc["data_type"], "int");
  EXPECT_EQ(qc["block_name_to_quantize"], "model.layers");
  EXPECT_EQ(qc["autoround_version"], io::kAutoRoundVersion);
  EXPECT_FALSE(qc.contains("extra_config"));  // every block linear is 32-aligned
  EXPECT_EQ(json::parse(slurp(dir_ + "/a/quantization_config.json")), qc);

  for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"}) {
    expect_rtn_of(dir_ + "/a", dir_ + "/bf16", std::string("model.layers.1.") + m,
                  formats::Layout::kGptq, 4, true);
  }
  // AutoRound leaves lm_head and the embeddings in the model dtype.
  auto ckpt = io::Checkpoint::open(dir_ + "/a");
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->get("lm_head.weight")->dtype, DType::kBF16);
  EXPECT_EQ(ckpt->get("model.embed_tokens.weight")->dtype, DType::kBF16);
  EXPECT_EQ(ckpt->get("model.layers.0.self_attn.q_proj.qweight")->dtype, DType::kI32);
  EXPECT_FALSE(ckpt->has("model.layers.0.self_attn.q_proj.g_idx"));  // auto_round:auto_gptq

  auto model = models::Model::load(dir_ + "/a");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->quant_config().method(), "auto-round");
  const auto linears = (*model)->linears();
  ASSERT_EQ(linears.size(), 2u * 7 + 1);
  for (const auto& l : linears) {
    EXPECT_EQ(l.scheme.quantized(), l.name != "lm_head") << l.name;
  }
}

TEST_F(QuantCli, EveryFormatWritesWhatDetectionReadsBack) {
  make("bf16", "", "tiny80");
  struct Case {
    std::string format, scheme;
    std::string quant_method;
    formats::Layout layout;
    int bits;
    bool sym;
  };
  const std::vector<Case> cases = {
      // auto-round packs 4-bit asym as AWQ, other asym widths as GPTQ with true zeros.
      {"auto_round", "w4g32-asym", "auto-round", formats::Layout::kAwq, 4, false},
      {"auto_round", "w8g32-asym", "auto-round", formats::Layout::kGptq, 8, false},
      {"auto_round", "w3g32", "auto-round", formats::Layout::kGptq, 3, true},
      {"auto_round", "w2g64", "auto-round", formats::Layout::kGptq, 2, true},
      {"auto_round", "w8", "auto-round", formats::Layout::kGptq, 8, true},
      {"auto_gptq", "w4g32", "gptq", formats::Layout::kGptq, 4, true},
      {"auto_awq", "w4g32-asym", "awq", formats::Layout::kAwq, 4, false},
      {"compressed-tensors", "w8", "compressed-tensors", formats::Layout::kCtPacked, 8, true},
      {"compressed-tensors", "w4g32-asym", "compressed-tensors", formats::Layout::kCtPacked, 4,
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.format + " " + c.scheme);
    const std::string out = c.format + "-" + c.scheme;
    make(out, "--quantize " + c.scheme + " --format " + c.format, "tiny80");
    const std::string qdir = dir_ + "/" + out;
    const json qc = json::parse(slurp(qdir + "/config.json"))["quantization_config"];
    EXPECT_EQ(qc["quant_method"], c.quant_method);
    expect_rtn_of(qdir, dir_ + "/bf16", "model.layers.0.self_attn.v_proj", c.layout, c.bits, c.sym);
    auto model = models::Model::load(qdir);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    for (const auto& l : (*model)->linears()) {
      // intermediate 80 is not a multiple of 32: the MLP and lm_head stay 16-bit.
      const bool quantized = l.name.find("self_attn") != std::string::npos;
      EXPECT_EQ(l.scheme.quantized(), quantized) << l.name;
    }
  }
  const json gptq = json::parse(slurp(dir_ + "/auto_gptq-w4g32/config.json"));
  EXPECT_EQ(gptq["quantization_config"]["checkpoint_format"], "gptq");
  auto ckpt = io::Checkpoint::open(dir_ + "/auto_gptq-w4g32");
  ASSERT_TRUE(ckpt.ok());
  EXPECT_TRUE(ckpt->has("model.layers.0.self_attn.q_proj.g_idx"));
  EXPECT_TRUE(ckpt->has("model.layers.0.mlp.up_proj.weight"));
  const json ct = json::parse(slurp(dir_ + "/compressed-tensors-w8/config.json"));
  EXPECT_EQ(ct["quantization_config"]["format"], "pack-quantized");
  EXPECT_EQ(ct["quantization_config"]["ignore"][0], "lm_head");
  EXPECT_EQ(ct["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"],
            "channel");
  const json ar = json::parse(slurp(dir_ + "/auto_round-w4g32-asym/config.json"));
  EXPECT_EQ(ar["quantization_config"]["packing_format"], "auto_round:auto_awq");
  const json ar8 = json::parse(slurp(dir_ + "/auto_round-w8g32-asym/config.json"));
  EXPECT_EQ(ar8["quantization_config"]["packing_format"], "auto_round");
  EXPECT_EQ(ar["quantization_config"]["extra_config"]["model.layers.1.mlp.down_proj"]["bits"], 16);
}

TEST_F(QuantCli, InspectShowsTheMethodAKernelPerLayerAndLogicalParameters) {
  make("bf16", "");
  make("q", "--quantize w4g32");
  CliResult text = run_cli("inspect " + dir_ + "/q");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("auto-round"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("model.layers.*.self_attn.q_proj"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("x2"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("lm_head"), std::string::npos) << text.output;
  auto model = models::Model::load(dir_ + "/q");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  for (const auto& l : (*model)->linears()) {
    EXPECT_NE(text.output.find(l.weight->kernel()), std::string::npos) << l.name;
    EXPECT_NE(text.output.find(l.scheme.describe()), std::string::npos) << l.name;
  }

  CliResult js = run_cli("inspect --json " + dir_ + "/q", false);
  ASSERT_EQ(js.exit_code, 0) << js.output;
  const json q = json::parse(js.output);
  CliResult ref_js = run_cli("inspect --json " + dir_ + "/bf16", false);
  ASSERT_EQ(ref_js.exit_code, 0) << ref_js.output;
  const json ref = json::parse(ref_js.output);
  EXPECT_TRUE(ref["quantization"].is_null());
  // Packed tensors count as the n x k weights they hold: the same model, the same count.
  EXPECT_EQ(q["parameters"], ref["parameters"]);
  EXPECT_LT(q["stored_elements"].get<int64_t>(), ref["stored_elements"].get<int64_t>());
  const json& quant = q["quantization"];
  EXPECT_EQ(quant["method"], "auto-round");
  ASSERT_EQ(quant["linears"].size(), 2u * 7 + 1);
  uint64_t resident = 0, bf16 = 0;
  for (const auto& l : quant["linears"]) {
    EXPECT_FALSE(l["kernel"].get<std::string>().empty());
    resident += l["resident_bytes"].get<uint64_t>();
    bf16 += l["bf16_bytes"].get<uint64_t>();
    EXPECT_EQ(l["bf16_bytes"], l["shape"][0].get<uint64_t>() * l["shape"][1].get<uint64_t>() * 2);
  }
  EXPECT_EQ(quant["linear_resident_bytes"], resident);
  EXPECT_EQ(quant["linear_bf16_bytes"], bf16);
  EXPECT_LT(resident, bf16);
  EXPECT_EQ(quant["model_resident_bytes"], (*model)->resident_weight_bytes());
  EXPECT_EQ(quant["model_bf16_bytes"], ref["parameters"].get<uint64_t>() * 2);

  CliResult plain = run_cli("inspect " + dir_ + "/bf16");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("quantization:              none"), std::string::npos)
      << plain.output;
}

TEST_F(QuantCli, QuantizationFlagMustAgreeWithTheCheckpoint) {
  make("q", "--quantize w4g32");
  make("bf16", "");
  for (const auto& name : {"tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"}) {
    fs::copy_file(fs::path(QS_SOURCE_DIR) / "models/stories260K" / name,
                  fs::path(dir_) / "q" / name);
  }
  const std::string gen = "generate --model " + dir_ + "/q --prompt 'Once upon a time' " +
                          "--max-tokens 6 --temperature 0 --threads 1";
  CliResult plain = run_cli(gen);
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  CliResult agreed = run_cli(gen + " --quantization auto-round");
  EXPECT_EQ(agreed.exit_code, 0) << agreed.output;
  EXPECT_EQ(agreed.output.substr(0, agreed.output.find("[generate]")),
            plain.output.substr(0, plain.output.find("[generate]")));  // greedy, same text
  CliResult alias = run_cli(gen + " --quantization=inc");
  EXPECT_EQ(alias.exit_code, 0) << alias.output;
  CliResult refused = run_cli(gen + " --quantization awq");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("does not match"), std::string::npos) << refused.output;

  CliResult inspect = run_cli("inspect --quantization awq " + dir_ + "/q");
  EXPECT_EQ(inspect.exit_code, 1);
  EXPECT_NE(inspect.output.find("does not match"), std::string::npos) << inspect.output;
  CliResult unquantized = run_cli("inspect --quantization gptq " + dir_ + "/bf16");
  EXPECT_EQ(unquantized.exit_code, 1) << unquantized.output;
  CliResult bench = run_cli("bench latency --model " + dir_ + "/q --quantization gptq " +
                            "--input-len 4 --output-len 2 --threads 1 --repetitions 1");
  EXPECT_EQ(bench.exit_code, 1);
  EXPECT_NE(bench.output.find("does not match"), std::string::npos) << bench.output;
  CliResult chat_help = run_cli("chat --help");
  EXPECT_NE(chat_help.output.find("--quantization"), std::string::npos);
}

TEST_F(QuantCli, BenchCountsResidentBytesPerToken) {
  make("bf16", "");
  make("q", "--quantize w8");
  for (const char* m : {"bf16", "q"}) {
    SCOPED_TRACE(m);
    const std::string model_dir = dir_ + "/" + m;
    CliResult r = run_cli("bench latency --model " + model_dir +
                          " --input-len 8 --output-len 4 --threads 1 --repetitions 1 " +
                          "--no-roofline --json " + dir_ + "/" + m + ".json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("| resident MiB |"), std::string::npos) << r.output;
    const json results = json::parse(slurp(dir_ + "/" + m + ".json"));
    ASSERT_EQ(results.size(), 2u);
    auto model = models::Model::load(model_dir);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ(results[1]["weight_bytes_per_token"], (*model)->decode_weight_bytes());
    EXPECT_EQ(results[1]["resident_weight_bytes"], (*model)->resident_weight_bytes());
    EXPECT_EQ(results[1]["quantization"], std::string(m) == "q" ? "auto-round" : "");
  }
  const json bf16 = json::parse(slurp(dir_ + "/bf16.json"));
  const json q = json::parse(slurp(dir_ + "/q.json"));
  EXPECT_LT(q[1]["weight_bytes_per_token"].get<uint64_t>(),
            bf16[1]["weight_bytes_per_token"].get<uint64_t>());
}

TEST_F(QuantCli, BadQuantizeRequestsAreClearErrors) {
  const std::string base = "make-model --config " + dir_ + "/tiny.json --out " + dir_ + "/x ";
  CliResult bits = run_cli(base + "--quantize w5g128");
  EXPECT_EQ(bits.exit_code, 1);
  EXPECT_NE(bits.output.find("bits must be 2, 3, 4 or 8"), std::string::npos) << bits.output;
  CliResult junk = run_cli(base + "--quantize int4");
  EXPECT_EQ(junk.exit_code, 1);
  EXPECT_NE(junk.output.find("w<bits>"), std::string::npos) << junk.output;
  CliResult awq8 = run_cli(base + "--quantize w8g128 --format auto_awq");
  EXPECT_EQ(awq8.exit_code, 1);
  EXPECT_NE(awq8.output.find("4-bit weights only"), std::string::npos) << awq8.output;
  CliResult format = run_cli(base + "--quantize w4g128 --format gguf");
  EXPECT_EQ(format.exit_code, 1);
  EXPECT_NE(format.output.find("auto_gptq"), std::string::npos) << format.output;
  CliResult no_scheme = run_cli(base + "--format auto_gptq");
  EXPECT_EQ(no_scheme.exit_code, 1);
  EXPECT_NE(no_scheme.output.find("--format needs --quantize"), std::string::npos);

  auto spec = io::parse_int_quant_spec("w4g128-asym");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->bits, 4);
  EXPECT_EQ(spec->group_size, 128);
  EXPECT_FALSE(spec->sym);
  EXPECT_EQ(io::int_quant_spec_name(*spec), "w4g128-asym");
  auto w8 = io::parse_int_quant_spec("w8");
  ASSERT_TRUE(w8.ok());
  EXPECT_EQ(w8->group_size, -1);
  EXPECT_TRUE(w8->sym);
  EXPECT_FALSE(io::parse_int_quant_spec("w4g0").ok());
  EXPECT_FALSE(io::parse_int_quant_spec("w4g128-foo").ok());
}

}  // namespace
}  // namespace qs
