// Unit tests for io/quant_config detection of compressed-tensors (llm-compressor W4A16,
// W8A16, W8A8, FP8_DYNAMIC, FP8_BLOCK presets) and HF fp8 checkpoints: target / ignore
// matching, strategies, formats we refuse and why.
#include <gtest/gtest.h>

#include <string>

#include "io/quant_config.h"
#include "quant_config_test_util.h"

namespace qs::io {
namespace {

using formats::Layout;
using testing::fp8;
using testing::has;
using testing::kDense;
using testing::kDown;
using testing::kQ;
using testing::kRouter;
using testing::parse_error;
using testing::parse_ok;
using testing::same;
using testing::scheme;
using testing::with_act;
using AT = formats::ActType;
using AS = formats::ActStrategy;

// One llm-compressor config.json quantization_config with `weights`, `acts` and `format`
// substituted into the shape llm-compressor 0.6 writes.
std::string ct(const std::string& weights, const std::string& format,
               const std::string& acts = "null", const std::string& extra = "") {
  return R"({
    "config_groups": {"group_0": {
      "input_activations": )" +
         acts + R"(, "output_activations": null, "targets": ["Linear"],
      "weights": )" +
         weights + R"(}},
    "format": ")" +
         format + R"(", "global_compression_ratio": null, "ignore": ["lm_head"],
    "kv_cache_scheme": null, "quant_method": "compressed-tensors",
    "quantization_status": "compressed", "sparsity_config": {}, "transform_config": {},
    "version": "0.10.2")" +
         extra + "}";
}

const char* const kW4A16 = R"({"actorder": null, "block_structure": null, "dynamic": false,
    "group_size": 128, "num_bits": 4, "observer": "minmax", "observer_kwargs": {},
    "strategy": "group", "symmetric": true, "type": "int"})";

TEST(QuantConfigCt, W4A16PackQuantized) {
  const auto c = parse_ok(ct(kW4A16, "pack-quantized"));
  EXPECT_EQ(c.method(), "compressed-tensors");
  EXPECT_EQ(c.format(), "pack-quantized");
  const auto s = scheme(Layout::kCtPacked, 4, 128, true);
  EXPECT_TRUE(same(c.default_scheme(), s));
  EXPECT_TRUE(same(c.scheme_for(kQ), s));
  EXPECT_TRUE(same(c.scheme_for(kDown), s));
  EXPECT_TRUE(same(c.scheme_for("lm_head"), kDense));
  // "Linear" targets every linear module, the router too unless ignored (literal semantics:
  // the checkpoint stores what the recipe matched).
  EXPECT_TRUE(same(c.scheme_for(kRouter), s));
  EXPECT_TRUE(c.notes().empty());
  EXPECT_EQ(c.summary(), "compressed-tensors (pack-quantized) int4 g128 sym, from config.json");
}

TEST(QuantConfigCt, W4A16AsymActOrder) {
  const auto c = parse_ok(ct(R"({"actorder": "group", "dynamic": false, "group_size": 32,
      "num_bits": 4, "strategy": "group", "symmetric": false, "type": "int"})",
                             "pack-quantized"));
  EXPECT_TRUE(same(c.scheme_for(kQ), scheme(Layout::kCtPacked, 4, 32, false, false, true)));
  const auto w = parse_ok(ct(R"({"actorder": "weight", "group_size": 128, "num_bits": 4,
      "strategy": "group", "type": "int"})",
                             "pack-quantized"));
  EXPECT_FALSE(w.scheme_for(kQ).desc_act);
}

TEST(QuantConfigCt, W8A16Channel) {
  const auto c = parse_ok(ct(R"({"actorder": null, "dynamic": false, "group_size": null,
      "num_bits": 8, "strategy": "channel", "symmetric": true, "type": "int"})",
                             "pack-quantized"));
  EXPECT_TRUE(same(c.scheme_for(kDown), scheme(Layout::kCtPacked, 8, -1, true)));
  // Strategy omitted: inferred from group_size (-1 = channel).
  const auto inferred =
      parse_ok(ct(R"({"group_size": -1, "num_bits": 8, "type": "int"})", "pack-quantized"));
  EXPECT_TRUE(same(inferred.scheme_for(kDown), scheme(Layout::kCtPacked, 8, -1, true)));
}

TEST(QuantConfigCt, W8A8IntQuantizedNotesActivations) {
  const auto c = parse_ok(ct(R"({"dynamic": false, "num_bits": 8, "strategy": "channel",
      "symmetric": true, "type": "int"})",
                             "int-quantized",
                             R"({"dynamic": true, "num_bits": 8, "strategy": "token",
      "symmetric": true, "type": "int"})"));
  EXPECT_TRUE(same(c.scheme_for(kQ),
                   with_act(scheme(Layout::kCtInt, 8, -1, true), AT::kInt8, AS::kToken, true)));
  ASSERT_EQ(c.notes().size(), 1u);
  EXPECT_TRUE(has(c.notes()[0], "input_activations")) << c.notes()[0];
  // Per-tensor int weights are fine for the unpacked layout.
  const auto t =
      parse_ok(ct(R"({"num_bits": 8, "strategy": "tensor", "type": "int"})", "naive-quantized"));
  EXPECT_TRUE(same(t.scheme_for(kQ), scheme(Layout::kCtInt, 8, 0, true)));
}

// input_activations become the scheme's declared activation quantization (run by the
// kernels as vLLM does); what we cannot run is refused by name.
TEST(QuantConfigCt, InputActivationsAsDeclared) {
  const std::string w8 = R"({"num_bits": 8, "strategy": "channel", "type": "int"})";
  const auto stat = parse_ok(ct(w8, "int-quantized",
                                R"({"dynamic": false, "num_bits": 8, "strategy": "tensor",
      "symmetric": false, "type": "int"})"));
  EXPECT_TRUE(same(stat.scheme_for(kQ), with_act(scheme(Layout::kCtInt, 8, -1, true), AT::kInt8,
                                                 AS::kTensor, false, 0, false)));
  EXPECT_EQ(stat.scheme_for(kQ).describe(),
            "ct-int int8 per-channel sym; activations int8 static per-tensor asym");
  const auto group = parse_ok(ct(R"({"num_bits": 8, "strategy": "block", "type": "float",
      "block_structure": [128, 128]})",
                                 "float-quantized",
                                 R"({"dynamic": true, "num_bits": 8, "strategy": "group",
      "group_size": 128, "type": "float"})"));
  EXPECT_TRUE(
      same(group.scheme_for(kQ), with_act(fp8(0, 128, 128), AT::kFp8, AS::kGroup, true, 128)));
  // A dynamic per-tensor scale would couple a request to its batch: run per token, noted.
  const auto per_call = parse_ok(ct(w8, "int-quantized",
                                    R"({"dynamic": true, "num_bits": 8, "strategy": "tensor",
      "type": "int"})"));
  EXPECT_EQ(per_call.scheme_for(kQ).act.strategy, AS::kToken);
  EXPECT_TRUE(has(per_call.notes().at(0), "batch-invariant")) << per_call.notes().at(0);
  EXPECT_TRUE(has(parse_error(ct(w8, "int-quantized",
                                 R"({"dynamic": "local", "num_bits": 4, "type": "float"})")),
                  "8-bit int or float"));
  EXPECT_TRUE(has(parse_error(ct(w8, "int-quantized",
                                 R"({"dynamic": false, "num_bits": 8, "strategy": "token",
      "type": "int"})")),
                  "static activation scales are supported per tensor only"));
  EXPECT_TRUE(has(parse_error(ct(R"({"num_bits": 8, "strategy": "channel", "type": "float"})",
                                 "float-quantized",
                                 R"({"dynamic": true, "num_bits": 8, "strategy": "token",
      "symmetric": false, "type": "float"})")),
                  "fp8 activations have no zero point"));
}

TEST(QuantConfigCt, Fp8DynamicAndBlock) {
  const auto dyn = parse_ok(ct(R"({"dynamic": false, "num_bits": 8, "strategy": "channel",
      "symmetric": true, "type": "float"})",
                               "float-quantized",
                               R"({"dynamic": true, "num_bits": 8, "strategy": "token",
      "symmetric": true, "type": "float"})"));
  EXPECT_TRUE(same(dyn.scheme_for(kQ), with_act(fp8(-1), AT::kFp8, AS::kToken, true)));
  EXPECT_TRUE(same(dyn.scheme_for("lm_head"), kDense));
  EXPECT_EQ(dyn.summary(),
            "compressed-tensors (float-quantized) fp8 e4m3 per-channel, from config.json");
  const auto block = parse_ok(ct(R"({"block_structure": [128, 128], "num_bits": 8,
      "strategy": "block", "symmetric": true, "type": "float"})",
                                 "float-quantized"));
  EXPECT_TRUE(same(block.scheme_for(kDown), fp8(0, 128, 128)));
  const auto tensor =
      parse_ok(ct(R"({"num_bits": 8, "strategy": "tensor", "type": "float"})", "float-quantized"));
  EXPECT_TRUE(same(tensor.scheme_for(kDown), fp8(0)));
}

// Targets: exact names and "re:" (re.match from the start) before class names; ignore first.
TEST(QuantConfigCt, TargetsAndIgnore) {
  const auto c = parse_ok(R"({
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head", "re:.*mlp.gate$", "model.layers.0.self_attn.o_proj"],
    "config_groups": {
      "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "group_size": 128,
                  "strategy": "group", "type": "int", "symmetric": true}},
      "group_1": {"targets": ["re:.*down_proj$", "model.layers.3.self_attn.q_proj"],
                  "weights": {"num_bits": 8, "strategy": "channel", "type": "int",
                  "symmetric": true}}
    }
  })");
  const auto int4 = scheme(Layout::kCtPacked, 4, 128, true);
  const auto int8 = scheme(Layout::kCtPacked, 8, -1, true);
  EXPECT_TRUE(same(c.scheme_for(kQ), int4));
  EXPECT_TRUE(same(c.scheme_for(kDown), int8));
  EXPECT_TRUE(same(c.scheme_for("model.layers.3.self_attn.q_proj"), int8));
  EXPECT_TRUE(same(c.scheme_for(kRouter), kDense));
  EXPECT_TRUE(same(c.scheme_for("model.layers.0.mlp.gate_proj"), int4));
  EXPECT_TRUE(same(c.scheme_for("model.layers.0.self_attn.o_proj"), kDense));
  EXPECT_TRUE(same(c.scheme_for("model.layers.1.self_attn.o_proj"), int4));
  EXPECT_TRUE(same(c.scheme_for("lm_head"), kDense));
  // re.match anchors at the start: "re:layers" does not match "model.layers...".
  const auto anchored = parse_ok(R"({
    "quant_method": "compressed_tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": ["re:layers\\.0\\."], "weights": {"num_bits": 4,
      "group_size": 64, "type": "int"}}}
  })");
  EXPECT_EQ(anchored.method(), "compressed-tensors");
  EXPECT_TRUE(same(anchored.scheme_for(kQ), kDense));
  EXPECT_TRUE(same(anchored.scheme_for("layers.0.q"), scheme(Layout::kCtPacked, 4, 64, true)));
}

TEST(QuantConfigCt, PerGroupFormatMixedPrecision) {
  const auto c = parse_ok(R"({
    "quant_method": "compressed-tensors", "format": "mixed-precision",
    "config_groups": {
      "group_0": {"format": "pack-quantized", "targets": ["re:.*self_attn.*"],
                  "weights": {"num_bits": 4, "group_size": 128, "type": "int"}},
      "group_1": {"format": "float-quantized", "targets": ["re:.*mlp.*"],
                  "weights": {"num_bits": 8, "strategy": "channel", "type": "float"}}
    }
  })");
  EXPECT_TRUE(same(c.scheme_for(kQ), scheme(Layout::kCtPacked, 4, 128, true)));
  EXPECT_TRUE(same(c.scheme_for(kDown), fp8(-1)));
}

TEST(QuantConfigCt, Errors) {
  const std::string frozen = parse_error(R"({"quant_method": "compressed-tensors",
      "format": "pack-quantized", "quantization_status": "frozen",
      "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4}}}})");
  EXPECT_TRUE(has(frozen, "quantization_status = \"frozen\"")) << frozen;
  EXPECT_TRUE(has(frozen, "not compressed")) << frozen;
  for (const char* format : {"sparse-24-bitmask", "nvfp4-pack-quantized", "marlin-24", "dense"}) {
    const std::string e = parse_error(ct(kW4A16, format));
    EXPECT_TRUE(has(e, std::string("quantization_config.format = \"") + format + "\"")) << e;
  }
  EXPECT_TRUE(has(parse_error(ct(kW4A16, "pack-quantized", "null",
                                 R"(, "sparsity_config": {"format": "sparse-24-bitmask"})")),
                  "sparse"));
  EXPECT_TRUE(has(
      parse_error(ct(R"({"num_bits": 4, "type": "float", "group_size": 16})", "float-quantized")),
      "num_bits = 4"));
  EXPECT_TRUE(
      has(parse_error(ct(R"({"num_bits": 16, "type": "int", "group_size": 128})", "int-quantized")),
          "num_bits = 16"));
  EXPECT_TRUE(has(
      parse_error(ct(R"({"num_bits": 4, "type": "int", "strategy": "group"})", "pack-quantized")),
      "strategy group needs a positive group_size"));
  EXPECT_TRUE(has(
      parse_error(ct(R"({"num_bits": 4, "type": "int", "strategy": "tensor"})", "pack-quantized")),
      "strategy = \"tensor\""));
  EXPECT_TRUE(has(parse_error(R"({"quant_method": "compressed-tensors",
      "format": "pack-quantized", "config_groups": {}})"),
                  "config_groups"));
}

// ----- fp8 -----------------------------------------------------------------------------------

// DeepSeek-V3 / Qwen3-FP8 style block scales.
TEST(QuantConfigFp8, BlockScales) {
  const auto c = parse_ok(R"({"activation_scheme": "dynamic", "fmt": "e4m3",
      "quant_method": "fp8", "weight_block_size": [128, 128]})");
  EXPECT_EQ(c.method(), "fp8");
  EXPECT_EQ(c.format(), "");
  const auto block = with_act(fp8(0, 128, 128), AT::kFp8, AS::kGroup, true, 128);
  EXPECT_TRUE(same(c.scheme_for(kQ), block));
  EXPECT_TRUE(same(c.scheme_for(kDown), block));
  EXPECT_TRUE(same(c.scheme_for("lm_head"), kDense));
  EXPECT_TRUE(same(c.scheme_for(kRouter), kDense));
  ASSERT_EQ(c.notes().size(), 1u);
  EXPECT_TRUE(has(c.notes()[0], "dynamic"));
  EXPECT_EQ(c.summary(), "fp8 fp8 e4m3 block 128x128, from config.json");
}

TEST(QuantConfigFp8, PerTensorWithIgnoredLayers) {
  const auto c = parse_ok(R"({"quant_method": "fp8", "activation_scheme": "static",
      "ignored_layers": ["model.layers.0.mlp.down_proj"],
      "modules_to_not_convert": ["self_attn.o_proj"]})");
  const auto fp8_static = with_act(fp8(0), AT::kFp8, AS::kTensor, false);
  EXPECT_TRUE(same(c.scheme_for(kQ), fp8_static));
  EXPECT_TRUE(same(c.scheme_for(kDown), kDense));
  EXPECT_TRUE(same(c.scheme_for("model.layers.1.mlp.down_proj"), fp8_static));
  EXPECT_TRUE(same(c.scheme_for("model.layers.5.self_attn.o_proj"), kDense));
  EXPECT_TRUE(has(c.notes().at(0), "input_scale"));
}

TEST(QuantConfigFp8, Errors) {
  EXPECT_TRUE(has(parse_error(R"({"quant_method": "fp8", "weight_block_size": [128]})"),
                  "weight_block_size = [128]"));
  EXPECT_TRUE(has(parse_error(R"({"quant_method": "fp8", "weight_block_size": [0, 128]})"),
                  "block sizes must be positive"));
  EXPECT_TRUE(has(parse_error(R"({"quant_method": "fp8", "fmt": "e5m2"})"), "fmt = \"e5m2\""));
  EXPECT_TRUE(has(parse_error(R"({"quant_method": "fp8", "activation_scheme": "sometimes"})"),
                  "activation_scheme"));
}

TEST(QuantConfigFp8, RequestedQuantization) {
  const auto c = parse_ok(R"({"quant_method": "fp8"})");
  EXPECT_TRUE(check_requested_quantization(c, "fp8").ok());
  EXPECT_TRUE(check_requested_quantization(c, "FP8").ok());
  EXPECT_FALSE(check_requested_quantization(c, "compressed-tensors").ok());
  const auto ctc = parse_ok(ct(kW4A16, "pack-quantized"));
  EXPECT_TRUE(check_requested_quantization(ctc, "compressed-tensors").ok());
  EXPECT_TRUE(check_requested_quantization(ctc, "compressed_tensors").ok());
  EXPECT_FALSE(check_requested_quantization(ctc, "gptq").ok());
}

}  // namespace
}  // namespace qs::io
