// Unit tests for io/quant_config detection of AutoRound, GPTQ and AWQ checkpoints: configs
// shaped like real exports (AutoRound 0.12 and legacy intel/auto-round, TheBloke / GPTQModel
// GPTQ, AutoAWQ), the scheme every kind of module gets, where the metadata is found, and the
// --quantization check. compressed-tensors and fp8 are in quant_config_ct_fp8_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "io/checkpoint.h"
#include "io/quant_config.h"
#include "quant_config_test_util.h"

namespace qs::io {
namespace {

namespace fs = std::filesystem;
using formats::Layout;
using nlohmann::json;
using testing::has;
using testing::kDense;
using testing::kDown;
using testing::kQ;
using testing::kRouter;
using testing::parse_error;
using testing::parse_ok;
using testing::same;
using testing::scheme;

// ----- AutoRound -----------------------------------------------------------------------------

// AutoRound 0.12 W4A16 export of a multimodal model: only the keys that differ from the
// defaults, blocks under model.language_model.layers, per-layer extra_config.
TEST(QuantConfigAutoRound, V012WithExtraConfigAndBlockNames) {
  const auto c = parse_ok(R"({
    "bits": 4, "data_type": "int", "group_size": 128, "sym": true,
    "autoround_version": "0.12.3",
    "block_name_to_quantize": "model.language_model.layers",
    "quant_method": "auto-round", "packing_format": "auto_round:auto_gptq",
    "extra_config": {
      "model.language_model.layers.0.mlp.down_proj": {"bits": 8, "group_size": 32},
      ".*self_attn\\.k_proj": {"bits": 16, "data_type": "fp"},
      "model.language_model.layers.1.mlp.down_proj": {"bits": 16, "data_type": "float"}
    }
  })");
  EXPECT_EQ(c.method(), "auto-round");
  EXPECT_EQ(c.format(), "auto_round:auto_gptq");
  const auto int4 = scheme(Layout::kGptq, 4, 128, true, /*zero_minus_one=*/true);
  EXPECT_TRUE(same(c.default_scheme(), int4));
  EXPECT_TRUE(same(c.scheme_for("model.language_model.layers.0.self_attn.q_proj"), int4));
  EXPECT_TRUE(same(c.scheme_for("model.language_model.layers.0.mlp.down_proj"),
                   scheme(Layout::kGptq, 8, 32, true, true)));
  EXPECT_TRUE(same(c.scheme_for("model.language_model.layers.1.mlp.down_proj"), kDense));
  EXPECT_TRUE(same(c.scheme_for("model.language_model.layers.2.mlp.down_proj"), int4));
  // Regex keys are searched anywhere in the name.
  EXPECT_TRUE(same(c.scheme_for("model.language_model.layers.7.self_attn.k_proj"), kDense));
  EXPECT_TRUE(same(c.scheme_for("lm_head"), kDense));
  EXPECT_TRUE(same(c.scheme_for("model.language_model.layers.0.mlp.gate"), kDense));
  // Outside the named blocks (a vision tower) nothing is quantized.
  EXPECT_TRUE(same(c.scheme_for("model.visual.blocks.0.attn.qkv"), kDense));
  EXPECT_TRUE(same(c.scheme_for(kQ), kDense));
  EXPECT_EQ(c.summary(), "auto-round (auto_round:auto_gptq) int4 g128 sym, from config.json");
}

// Python's re.search semantics: an unanchored key also hits names that merely contain it.
TEST(QuantConfigAutoRound, ExtraConfigRegexIsSearch) {
  const auto c = parse_ok(R"({
    "bits": 4, "group_size": 128, "sym": true, "data_type": "int",
    "quant_method": "auto-round", "packing_format": "auto_round:auto_gptq",
    "extra_config": {"mlp\\.gate": {"bits": 16}, "layers\\.3\\.": {"bits": 8}}
  })");
  EXPECT_TRUE(same(c.scheme_for("model.layers.0.mlp.gate_proj"), kDense));
  EXPECT_TRUE(
      same(c.scheme_for("model.layers.3.mlp.up_proj"), scheme(Layout::kGptq, 8, 128, true, true)));
  EXPECT_TRUE(
      same(c.scheme_for("model.layers.13.mlp.up_proj"), scheme(Layout::kGptq, 4, 128, true, true)));
}

// An exact name wins over a regex key that also matches it.
TEST(QuantConfigAutoRound, ExactNameBeforeRegex) {
  const auto c = parse_ok(R"({
    "bits": 4, "group_size": 128, "sym": true, "quant_method": "auto-round",
    "extra_config": {".*down_proj": {"bits": 8}, "model.layers.0.mlp.down_proj": {"bits": 2}}
  })");
  EXPECT_TRUE(same(c.scheme_for(kDown), scheme(Layout::kGptq, 2, 128, true, true)));
  EXPECT_TRUE(same(c.scheme_for("model.layers.1.mlp.down_proj"),
                   scheme(Layout::kGptq, 8, 128, true, true)));
}

// A quantized lm_head lists every scheme key in extra_config; without block_name_to_quantize
// the blocks are model.layers.
TEST(QuantConfigAutoRound, QuantizedLmHeadAndDefaultBlocks) {
  const auto c = parse_ok(R"({
    "bits": 4, "group_size": 128, "sym": true, "data_type": "int",
    "quant_method": "auto-round", "packing_format": "auto_round:auto_gptq",
    "extra_config": {"lm_head": {"bits": 8, "group_size": 64, "sym": true, "data_type": "int"}}
  })");
  EXPECT_TRUE(same(c.scheme_for("lm_head"), scheme(Layout::kGptq, 8, 64, true, true)));
  EXPECT_TRUE(same(c.scheme_for(kQ), scheme(Layout::kGptq, 4, 128, true, true)));
  EXPECT_TRUE(same(c.scheme_for(kDown), scheme(Layout::kGptq, 4, 128, true, true)));
  EXPECT_TRUE(same(c.scheme_for(kRouter), kDense));
  EXPECT_TRUE(same(c.scheme_for("model.embed_tokens"), kDense));
  // Blocks found without the key: any <prefix>.layers.<i> (AutoRound auto-detects them).
  EXPECT_TRUE(same(c.scheme_for("model.language_model.layers.11.mlp.up_proj"),
                   scheme(Layout::kGptq, 4, 128, true, true)));
  EXPECT_TRUE(same(c.scheme_for("model.norm_layers.proj"), kDense));
}

// Packing formats as AutoRound's loader normalizes them (autoround.md §3.1).
TEST(QuantConfigAutoRound, PackingFormats) {
  struct Case {
    const char* packing;
    bool sym;
    const char* format;
    Layout layout;
    bool zero_minus_one;
  };
  const Case cases[] = {
      {"auto", true, "auto_round:auto_gptq", Layout::kGptq, true},
      {"auto_round:gptq", true, "auto_round:auto_gptq", Layout::kGptq, true},
      {"auto_round:auto_gptq", false, "auto_round:auto_gptq", Layout::kGptq, true},
      {"auto_round:awq", false, "auto_round:auto_awq", Layout::kAwq, false},
      {"auto_round:auto_awq", false, "auto_round:auto_awq", Layout::kAwq, false},
      {"auto_round", false, "auto_round", Layout::kGptq, false},
      {"AUTO_ROUND:GPTQMODEL", false, "auto_round:gptqmodel", Layout::kGptq, false},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.packing);
    json qc = {{"bits", 4},
               {"group_size", 128},
               {"sym", k.sym},
               {"data_type", "int"},
               {"quant_method", "auto-round"},
               {"packing_format", k.packing}};
    auto c = parse_quant_config(qc, "config.json");
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->format(), k.format);
    EXPECT_TRUE(same(c->scheme_for(kDown), scheme(k.layout, 4, 128, k.sym, k.zero_minus_one)));
  }
  // Absent packing_format and backend: auto_round:auto_gptq.
  const auto c =
      parse_ok(R"({"bits": 2, "group_size": 64, "sym": true, "quant_method": "auto-round"})");
  EXPECT_EQ(c.format(), "auto_round:auto_gptq");
  EXPECT_TRUE(same(c.default_scheme(), scheme(Layout::kGptq, 2, 64, true, true)));
}

// Legacy (<= 0.4) exports: quant_method intel/auto-round and a `backend` key, every tuning
// key listed.
TEST(QuantConfigAutoRound, LegacyIntelAutoRoundBackend) {
  const std::string legacy = R"({
    "bits": 4, "group_size": 128, "sym": false, "data_type": "int",
    "enable_quanted_input": true, "enable_minmax_tuning": true, "seqlen": 2048,
    "batch_size": 8, "scale_dtype": "torch.float16", "lr": 0.005, "minmax_lr": 0.005,
    "gradient_accumulate_steps": 1, "iters": 1000, "amp": true, "nsamples": 512,
    "low_gpu_mem_usage": true, "to_quant_block_names": null, "enable_norm_bias_tuning": false,
    "autoround_version": "0.3.1", "quant_method": "intel/auto-round",
    "backend": "BACKEND"
  })";
  auto with = [&](const std::string& backend) {
    std::string s = legacy;
    s.replace(s.find("BACKEND"), 7, backend);
    return parse_ok(s);
  };
  const auto zm1 = with("auto_round:gptq:exllamav2");
  EXPECT_EQ(zm1.method(), "auto-round");
  EXPECT_TRUE(same(zm1.scheme_for(kQ), scheme(Layout::kGptq, 4, 128, false, true)));
  EXPECT_TRUE(same(zm1.scheme_for("lm_head"), kDense));
  const auto exl = with("auto_round:exllamav2");
  EXPECT_TRUE(same(exl.scheme_for(kQ), scheme(Layout::kGptq, 4, 128, false, false)));
  const auto triton = with("auto_round:tritonv2");
  EXPECT_TRUE(same(triton.scheme_for(kQ), scheme(Layout::kGptq, 4, 128, false, false)));
}

TEST(QuantConfigAutoRound, MethodAliases) {
  for (const char* m : {"auto-round", "auto_round", "AutoRound", "Intel/Auto-Round"}) {
    json qc = {{"bits", 4}, {"group_size", 128}, {"quant_method", m}};
    auto c = parse_quant_config(qc, "config.json");
    ASSERT_TRUE(c.ok()) << m << ": " << c.status().message();
    EXPECT_EQ(c->method(), "auto-round") << m;
  }
}

// AutoRound FP8: block (group_size [128,128]) and weight-only per-channel without packing.
TEST(QuantConfigAutoRound, Fp8) {
  const auto block = parse_ok(R"({
    "bits": 8, "group_size": [128, 128], "sym": true, "data_type": "fp", "act_bits": 8,
    "quant_method": "auto-round", "packing_format": "auto_round:fp8"
  })");
  EXPECT_EQ(block.format(), "auto_round:fp8");
  EXPECT_TRUE(same(block.scheme_for(kQ), testing::fp8(0, 128, 128)));
  EXPECT_EQ(block.notes().size(), 1u);
  const auto woq = parse_ok(R"({
    "bits": 8, "group_size": -1, "sym": true, "data_type": "fp", "quant_method": "auto-round"
  })");
  EXPECT_EQ(woq.format(), "auto_round:fp8");
  EXPECT_TRUE(same(woq.scheme_for(kDown), testing::fp8(-1)));
  EXPECT_TRUE(same(woq.scheme_for("lm_head"), kDense));
}

TEST(QuantConfigAutoRound, Errors) {
  EXPECT_TRUE(has(parse_error(R"({"bits": 5, "group_size": 128, "quant_method": "auto-round"})"),
                  "config.json: quantization_config.bits = 5: must be one of 2, 3, 4, 8"));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "group_size": 0, "quant_method": "auto-round"})"),
                  "quantization_config.group_size = 0"));
  // AWQ packing holds 4-bit only, also for a layer override.
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "group_size": 128, "sym": false,
      "quant_method": "auto-round", "packing_format": "auto_round:auto_awq",
      "extra_config": {"model.layers.0.mlp.down_proj": {"bits": 8}}})"),
                  "extra_config[\"model.layers.0.mlp.down_proj\"].bits = 8"));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "group_size": 32, "data_type": "nv_fp",
      "quant_method": "auto-round", "packing_format": "auto_round:llm_compressor"})"),
                  "nv_fp"));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "group_size": 128,
      "quant_method": "auto-round", "packing_format": "auto_round:llm_compressor"})"),
                  "packing_format = \"auto_round:llm_compressor\""));
  EXPECT_TRUE(has(parse_error(R"j({"bits": 4, "group_size": 128, "quant_method": "auto-round",
      "extra_config": {"(?P<x>q_proj)": {"bits": 8}}})j"),
                  "extra_config key = \"(?P<x>q_proj)\""));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "group_size": 128, "quant_method": "auto-round",
      "extra_config": {"lm_head": 8}})"),
                  "config.json: quantization_config.extra_config[\"lm_head\"] = 8: expected an "
                  "object"));
  EXPECT_TRUE(has(parse_error(R"({"bits": "4", "group_size": 128, "quant_method": "auto-round"})"),
                  "bits = \"4\": expected an integer"));
}

// ----- GPTQ ----------------------------------------------------------------------------------

// TheBloke-style config.json quantization_config (AutoGPTQ, act-order).
TEST(QuantConfigGptq, TheBloke) {
  const auto c = parse_ok(R"({
    "bits": 4, "group_size": 128, "damp_percent": 0.1, "desc_act": true,
    "static_groups": false, "sym": true, "true_sequential": true,
    "model_name_or_path": null, "model_file_base_name": "model", "quant_method": "gptq"
  })");
  EXPECT_EQ(c.method(), "gptq");
  EXPECT_EQ(c.format(), "gptq");
  const auto s = scheme(Layout::kGptq, 4, 128, true, /*zero_minus_one=*/true, /*desc_act=*/true);
  EXPECT_TRUE(same(c.scheme_for(kQ), s));
  EXPECT_TRUE(same(c.scheme_for(kDown), s));
  EXPECT_TRUE(same(c.scheme_for("lm_head"), kDense));
  EXPECT_TRUE(same(c.scheme_for(kRouter), kDense));
  EXPECT_EQ(c.summary(), "gptq (gptq) int4 g128 sym act-order, from config.json");
}

// Old quantize_config.json without quant_method; 8-bit per-channel, desc_act with one group.
TEST(QuantConfigGptq, OldQuantizeConfigWithoutMethod) {
  const auto c = parse_ok(R"({"bits": 8, "group_size": -1, "damp_percent": 0.01,
      "desc_act": true, "sym": true, "true_sequential": true})",
                          "quantize_config.json");
  EXPECT_EQ(c.method(), "gptq");
  EXPECT_TRUE(same(c.scheme_for(kDown), scheme(Layout::kGptq, 8, -1, true, true, false)));
  EXPECT_EQ(c.notes().size(), 1u);
}

TEST(QuantConfigGptq, CheckpointFormatV2AndLmHead) {
  const auto c = parse_ok(R"({"bits": 2, "group_size": 64, "sym": false, "desc_act": false,
      "lm_head": true, "quant_method": "gptq", "checkpoint_format": "gptq_v2"})");
  EXPECT_EQ(c.format(), "gptq_v2");
  const auto s = scheme(Layout::kGptq, 2, 64, false, /*zero_minus_one=*/false);
  EXPECT_TRUE(same(c.scheme_for(kQ), s));
  EXPECT_TRUE(same(c.scheme_for("lm_head"), s));
  // GPTQModel's quantize_config.json says `format`.
  const auto f = parse_ok(R"({"bits": 4, "group_size": 128, "quant_method": "gptq",
      "format": "gptq_v2"})",
                          "quantize_config.json");
  EXPECT_FALSE(f.scheme_for(kQ).zero_minus_one);
}

// GPTQModel mixed precision through `dynamic`: "-:" skips, "+:" or bare overrides, re.match.
TEST(QuantConfigGptq, DynamicRules) {
  const auto c = parse_ok(R"({
    "bits": 4, "group_size": 128, "desc_act": false, "sym": true, "lm_head": true,
    "quant_method": "gptq", "checkpoint_format": "gptq",
    "dynamic": {
      "-:model\\.layers\\.0\\.mlp\\.down_proj": {},
      "+:.*\\.self_attn\\..*": {"bits": 8, "group_size": 32},
      "model\\.layers\\.1\\..*": {"sym": false, "desc_act": true},
      "+:layers\\.2\\.": {"bits": 8},
      "lm_head": {"bits": 8}
    },
    "meta": {"quantizer": ["gptqmodel:2.2.0"]}
  })");
  EXPECT_TRUE(same(c.scheme_for(kDown), kDense));
  EXPECT_TRUE(same(c.scheme_for(kQ), scheme(Layout::kGptq, 8, 32, true, true)));
  EXPECT_TRUE(same(c.scheme_for("model.layers.1.mlp.up_proj"),
                   scheme(Layout::kGptq, 4, 128, false, true, true)));
  // re.match anchors at the start: "layers\.2\." does not match "model.layers.2...".
  EXPECT_TRUE(same(c.scheme_for("model.layers.2.mlp.down_proj"),
                   scheme(Layout::kGptq, 4, 128, true, true)));
  EXPECT_TRUE(same(c.scheme_for("lm_head"), scheme(Layout::kGptq, 8, 128, true, true)));
}

// AutoRound's auto_gptq export: provider keys plus modules_in_block_to_quantize.
TEST(QuantConfigGptq, AutoRoundExportModulesInBlock) {
  const auto c = parse_ok(R"({
    "bits": 4, "group_size": 128, "sym": true, "desc_act": false, "true_sequential": false,
    "damp_percent": 0.01, "lm_head": false, "quant_method": "gptq", "provider": "auto-round",
    "autoround_version": "0.12.3",
    "modules_in_block_to_quantize": [["self_attn.k_proj", "self_attn.v_proj",
      "self_attn.q_proj", "self_attn.o_proj"], ["mlp.gate_proj", "mlp.up_proj"]]
  })");
  const auto s = scheme(Layout::kGptq, 4, 128, true, true);
  EXPECT_TRUE(same(c.scheme_for(kQ), s));
  EXPECT_TRUE(same(c.scheme_for("model.layers.0.mlp.gate_proj"), s));
  EXPECT_TRUE(same(c.scheme_for(kDown), kDense));
  EXPECT_TRUE(same(c.scheme_for(kRouter), kDense));
  EXPECT_TRUE(same(c.scheme_for("lm_head"), kDense));
  // A flat list naming the router quantizes it.
  const auto r = parse_ok(R"({"bits": 4, "group_size": 128, "quant_method": "gptq",
      "modules_in_block_to_quantize": ["mlp.gate", "mlp.experts.0.down_proj"]})");
  EXPECT_TRUE(same(r.scheme_for(kRouter), s));
  EXPECT_TRUE(same(r.scheme_for("model.layers.0.mlp.gate_proj"), kDense));
  EXPECT_TRUE(same(r.scheme_for("model.layers.0.mlp.experts.0.down_proj"), s));
  EXPECT_TRUE(same(r.scheme_for("model.layers.0.mlp.experts.1.down_proj"), kDense));
  // Entries are whole name components anywhere in the name, as vLLM's substring test is.
  const auto comp = parse_ok(R"({"bits": 4, "group_size": 128, "quant_method": "gptq",
      "modules_in_block_to_quantize": ["self_attn", "model.layers.0.mlp.down_proj"]})");
  EXPECT_TRUE(same(comp.scheme_for("model.layers.5.self_attn.o_proj"), s));
  EXPECT_TRUE(same(comp.scheme_for(kDown), s));
  EXPECT_TRUE(same(comp.scheme_for("model.layers.1.mlp.down_proj"), kDense));
  EXPECT_TRUE(same(comp.scheme_for("model.layers.0.self_attn_norm_proj"), kDense));
}

TEST(QuantConfigGptq, Errors) {
  EXPECT_TRUE(has(parse_error(R"({"bits": 5, "group_size": 128, "quant_method": "gptq"})"),
                  "config.json: quantization_config.bits = 5: must be one of 2, 3, 4, 8"));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4294967300, "group_size": 128, "quant_method": "gptq"})"),
                  "bits = 4294967300: not a bit width"));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "group_size": 0, "quant_method": "gptq"})"),
                  "group_size = 0"));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "quant_method": "gptq"})"),
                  "quantization_config.group_size is missing"));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "group_size": 128, "quant_method": "gptq",
      "checkpoint_format": "marlin"})"),
                  "checkpoint_format = \"marlin\""));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "group_size": 128, "quant_method": "marlin"})"),
                  "quant_method = \"marlin\""));
  EXPECT_TRUE(has(parse_error(R"({"bits": 4, "group_size": 128, "quant_method": "gptq",
      "dynamic": {"+:.*q_proj": {"bits": 6}}})"),
                  "dynamic[\"+:.*q_proj\"].bits = 6"));
  // A kernel name in the checkpoint means the plain layout.
  EXPECT_EQ(parse_ok(R"({"bits": 4, "group_size": 128, "quant_method": "gptq_marlin"})").method(),
            "gptq");
}

// ----- AWQ -----------------------------------------------------------------------------------

// AutoAWQ's own quant_config.json (no quant_method) and the config.json form.
TEST(QuantConfigAwq, AutoAwq) {
  const auto side = parse_ok(R"({"zero_point": true, "q_group_size": 128, "w_bit": 4,
      "version": "GEMM"})",
                             "quant_config.json");
  EXPECT_EQ(side.method(), "awq");
  EXPECT_EQ(side.format(), "gemm");
  const auto s = scheme(Layout::kAwq, 4, 128, /*sym=*/false);
  EXPECT_TRUE(same(side.scheme_for(kQ), s));
  const auto c = parse_ok(R"({"quant_method": "awq", "zero_point": true, "group_size": 64,
      "bits": 4, "version": "gemm", "modules_to_not_convert": ["visual", "mlp.gate"]})");
  const auto g64 = scheme(Layout::kAwq, 4, 64, false);
  EXPECT_TRUE(same(c.scheme_for(kQ), g64));
  EXPECT_TRUE(same(c.scheme_for(kDown), g64));
  EXPECT_TRUE(same(c.scheme_for("lm_head"), kDense));
  EXPECT_TRUE(same(c.scheme_for(kRouter), kDense));
  // Substring match: mlp.gate also names gate_proj, as in AutoAWQ.
  EXPECT_TRUE(same(c.scheme_for("model.layers.0.mlp.gate_proj"), kDense));
  EXPECT_TRUE(same(c.scheme_for("model.visual.blocks.0.attn.qkv"), kDense));
  const auto sym = parse_ok(R"({"quant_method": "awq", "zero_point": false, "bits": 4,
      "modules_to_not_convert": null})");
  EXPECT_TRUE(same(sym.scheme_for(kDown), scheme(Layout::kAwq, 4, 128, true)));
  EXPECT_EQ(sym.summary(), "awq (gemm) int4 g128 sym, from config.json");
}

TEST(QuantConfigAwq, Errors) {
  const std::string gemv = parse_error(R"({"quant_method": "awq", "zero_point": true,
      "group_size": 128, "bits": 4, "version": "gemv"})");
  EXPECT_TRUE(has(gemv, "version = \"gemv\"")) << gemv;
  EXPECT_TRUE(has(gemv, "only the AWQ GEMM layout is supported")) << gemv;
  EXPECT_TRUE(has(parse_error(R"({"quant_method": "awq", "bits": 8, "version": "gemm"})"),
                  "bits = 8: the AWQ GEMM layout is 4-bit only"));
  EXPECT_TRUE(has(
      parse_error(R"({"w_bit": 3, "q_group_size": 128, "zero_point": true})", "quant_config.json"),
      "quant_config.json: w_bit = 3"));
}

// ----- method, metadata location, --quantization ---------------------------------------------

TEST(QuantConfigMethod, UnknownAndMissing) {
  const std::string bnb = parse_error(R"({"quant_method": "bitsandbytes", "load_in_4bit": true})");
  EXPECT_TRUE(has(bnb,
                  "unknown quant_method 'bitsandbytes' (supported: auto-round, gptq, awq, "
                  "compressed-tensors, fp8)"))
      << bnb;
  EXPECT_TRUE(has(parse_error(R"({"load_in_4bit": true})"), "quant_method is missing"));
  EXPECT_TRUE(has(parse_error(R"({"producer": {"name": "modelopt"},
      "quantization": {"quant_algo": "FP8"}})"),
                  "ModelOpt"));
  EXPECT_TRUE(has(parse_error("[1, 2]"), "must be a JSON object"));
}

class QuantConfigLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_quant_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    ASSERT_TRUE(write_file((fs::path(dir_) / name).string(), text).ok());
  }
  std::string dir_;
};

TEST_F(QuantConfigLoad, UnquantizedWhenNothingAnywhere) {
  auto c = load_quant_config(dir_, json{{"model_type", "llama"}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->quantized());
  EXPECT_EQ(c->method(), "");
  EXPECT_TRUE(same(c->scheme_for(kQ), kDense));
  EXPECT_EQ(c->summary(), "not quantized");
  // An explicit null is no metadata either.
  auto n = load_quant_config(dir_, json{{"quantization_config", nullptr}});
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->quantized());
}

TEST_F(QuantConfigLoad, ConfigJsonBeforeSideFiles) {
  write("quantize_config.json", R"({"bits": 8, "group_size": -1, "quant_method": "gptq"})");
  const json config = json::parse(R"({"model_type": "llama", "quantization_config":
      {"bits": 4, "group_size": 128, "quant_method": "auto-round"}})");
  auto c = load_quant_config(dir_, config);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->method(), "auto-round");
  EXPECT_EQ(c->source(), "config.json");
}

TEST_F(QuantConfigLoad, CompressionConfigAndTextConfig) {
  auto cc = load_quant_config(dir_, json::parse(R"({"compression_config":
      {"quant_method": "gptq", "bits": 4, "group_size": 32}})"));
  ASSERT_TRUE(cc.ok()) << cc.status().message();
  EXPECT_EQ(cc->source(), "config.json compression_config");
  auto tc = load_quant_config(dir_, json::parse(R"({"text_config": {"quantization_config":
      {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true}}})"));
  ASSERT_TRUE(tc.ok()) << tc.status().message();
  EXPECT_EQ(tc->method(), "awq");
  EXPECT_EQ(tc->source(), "config.json text_config.quantization_config");
  // Messages point into the key the config came from.
  auto bad = load_quant_config(dir_, json::parse(R"({"compression_config":
      {"quant_method": "gptq", "bits": 7, "group_size": 32}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(
      has(bad.status().message(), "config.json compression_config: compression_config.bits = 7"))
      << bad.status().message();
}

TEST_F(QuantConfigLoad, SideFilesInOrder) {
  write("quant_config.json", R"({"zero_point": true, "q_group_size": 128, "w_bit": 4,
      "version": "GEMM"})");
  auto awq = load_quant_config(dir_, json::object());
  ASSERT_TRUE(awq.ok()) << awq.status().message();
  EXPECT_EQ(awq->method(), "awq");
  EXPECT_EQ(awq->source(), "quant_config.json");
  EXPECT_EQ(awq->summary(), "awq (gemm) int4 g128 asym, from quant_config.json");
  write("quantize_config.json", R"({"bits": 4, "group_size": 128, "desc_act": false})");
  auto gptq = load_quant_config(dir_, json::object());
  ASSERT_TRUE(gptq.ok()) << gptq.status().message();
  EXPECT_EQ(gptq->method(), "gptq");
  write("quantization_config.json",
        R"({"bits": 4, "group_size": 128, "quant_method": "auto-round"})");
  auto ar = load_quant_config(dir_, json::object());
  ASSERT_TRUE(ar.ok()) << ar.status().message();
  EXPECT_EQ(ar->method(), "auto-round");
  EXPECT_EQ(ar->source(), "quantization_config.json");
}

TEST_F(QuantConfigLoad, ModelOptSideFileIsRefused) {
  write("hf_quant_config.json", R"({"producer": {"name": "modelopt", "version": "0.19.0"},
      "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": null}})");
  auto c = load_quant_config(dir_, json::object());
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(has(c.status().message(), "hf_quant_config.json: producer.name = \"modelopt\""))
      << c.status().message();
}

TEST_F(QuantConfigLoad, BadJsonSideFileIsAnErrorNamingIt) {
  write("quantize_config.json", "{\"bits\": 4,, }");
  auto c = load_quant_config(dir_, json::object());
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(has(c.status().message(), "quantize_config.json:1:")) << c.status().message();
  EXPECT_TRUE(has(c.status().message(), "invalid JSON")) << c.status().message();
}

TEST(QuantConfigRequested, VllmRules) {
  const auto ar = parse_ok(R"({"bits": 4, "group_size": 128, "quant_method": "auto-round"})");
  for (const char* ok :
       {"", "auto-round", "auto_round", "autoround", "intel/auto-round", "inc", "INC"}) {
    EXPECT_TRUE(check_requested_quantization(ar, ok).ok()) << ok;
  }
  const Status gptq_on_ar = check_requested_quantization(ar, "gptq");
  EXPECT_FALSE(gptq_on_ar.ok());
  EXPECT_TRUE(has(gptq_on_ar.message(),
                  "--quantization gptq does not match the checkpoint's quantization method "
                  "auto-round"))
      << gptq_on_ar.message();

  const auto gptq = parse_ok(R"({"bits": 4, "group_size": 128, "quant_method": "gptq"})");
  for (const char* ok : {"gptq", "gptq_marlin", "marlin"}) {
    EXPECT_TRUE(check_requested_quantization(gptq, ok).ok()) << ok;
  }
  EXPECT_FALSE(check_requested_quantization(gptq, "awq").ok());
  const auto awq = parse_ok(R"({"bits": 4, "group_size": 128, "quant_method": "awq"})");
  EXPECT_TRUE(check_requested_quantization(awq, "awq").ok());
  EXPECT_TRUE(check_requested_quantization(awq, "awq_marlin").ok());
  EXPECT_FALSE(check_requested_quantization(awq, "gptq").ok());

  const QuantConfig none;
  const Status s = check_requested_quantization(none, "fp8");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(has(s.message(), "carries no quantization_config")) << s.message();
  EXPECT_TRUE(check_requested_quantization(none, "").ok());
}

}  // namespace
}  // namespace qs::io
