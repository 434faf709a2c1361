// Unit tests of the exporter's quantization_config dicts (io/quant_export.h), read back by our
// own detection, and of inspect's quantization section (io/checkpoint_summary.h): layers
// collapsed by block index, logical parameter counts, totals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/checkpoint_summary.h"
#include "io/quant_config.h"
#include "io/quant_export.h"

namespace qs::io {
namespace {

using nlohmann::json;

TEST(QuantExport, EveryFormatKeepsExactlyTheListedModulesDense) {
  // layers.1 must not catch layers.10/11 (AWQ matches by substring, GPTQModel by regex).
  const std::vector<std::string> dense = {"model.layers.1.mlp.down_proj"};
  const IntQuantSpec spec{4, 32, false};
  struct Case {
    ExportFormat format;
    std::string method;
    formats::Layout layout;
  };
  for (const Case& c :
       {Case{ExportFormat::kAutoRound, "auto-round", formats::Layout::kAwq},  // 4-bit asym
        Case{ExportFormat::kAutoGptq, "gptq", formats::Layout::kGptq},
        Case{ExportFormat::kAutoAwq, "awq", formats::Layout::kAwq},
        Case{ExportFormat::kCompressedTensors, "compressed-tensors", formats::Layout::kCtPacked}}) {
    SCOPED_TRACE(export_format_name(c.format));
    auto qc = make_quantization_config(c.format, spec, dense);
    ASSERT_TRUE(qc.ok()) << qc.status().to_string();
    auto parsed = parse_quant_config(*qc, "test");
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    EXPECT_EQ(parsed->method(), c.method);
    EXPECT_FALSE(parsed->scheme_for("model.layers.1.mlp.down_proj").quantized());
    EXPECT_FALSE(parsed->scheme_for("lm_head").quantized());
    for (const char* m : {"model.layers.10.mlp.down_proj", "model.layers.11.mlp.down_proj",
                          "model.layers.1.mlp.up_proj", "model.layers.0.self_attn.q_proj"}) {
      const formats::QuantScheme s = parsed->scheme_for(m);
      EXPECT_EQ(s.layout, c.layout) << m;
      EXPECT_EQ(s.bits, 4) << m;
      EXPECT_EQ(s.group_size, 32) << m;
      EXPECT_FALSE(s.sym) << m;
    }
  }
}

TEST(QuantExport, AutoRoundPackingFollowsSymmetry) {
  auto sym = make_quantization_config(ExportFormat::kAutoRound, {4, 128, true}, {});
  ASSERT_TRUE(sym.ok());
  EXPECT_EQ((*sym)["packing_format"], "auto_round:auto_gptq");
  EXPECT_TRUE(
      parse_quant_config(*sym, "t")->scheme_for("model.layers.0.mlp.up_proj").zero_minus_one);
  auto asym4 = make_quantization_config(ExportFormat::kAutoRound, {4, 128, false}, {});
  ASSERT_TRUE(asym4.ok());
  EXPECT_EQ((*asym4)["packing_format"], "auto_round:auto_awq");
  auto asym = make_quantization_config(ExportFormat::kAutoRound, {8, -1, false}, {});
  ASSERT_TRUE(asym.ok());
  EXPECT_EQ((*asym)["packing_format"], "auto_round");
  EXPECT_EQ((*asym)["group_size"], -1);
  EXPECT_FALSE(
      parse_quant_config(*asym, "t")->scheme_for("model.layers.0.mlp.up_proj").zero_minus_one);
  auto awq3 = make_quantization_config(ExportFormat::kAutoAwq, {3, 128, true}, {});
  EXPECT_FALSE(awq3.ok());
  auto ct8 = make_quantization_config(ExportFormat::kCompressedTensors, {8, -1, true}, {});
  ASSERT_TRUE(ct8.ok());
  const json& weights = (*ct8)["config_groups"]["group_0"]["weights"];
  EXPECT_EQ(weights["strategy"], "channel");
  EXPECT_TRUE(weights["group_size"].is_null());
}

TEST(QuantExport, SchemeNamesRoundTrip) {
  for (const char* name : {"w4g128", "w4g32", "w4g128-asym", "w8", "w8g128", "w2g64", "w3g128"}) {
    auto spec = parse_int_quant_spec(name);
    ASSERT_TRUE(spec.ok()) << name;
    EXPECT_EQ(int_quant_spec_name(*spec), name);
  }
  EXPECT_EQ(int_quant_spec_name(*parse_int_quant_spec("w4g128-sym")), "w4g128");
  for (const char* bad : {"", "4g128", "w", "w16", "w4g", "w4g-1", "w4x", "w4g128-asymm"}) {
    EXPECT_FALSE(parse_int_quant_spec(bad).ok()) << bad;
  }
  EXPECT_TRUE(int_packable(64, 96));
  EXPECT_FALSE(int_packable(64, 80));
}

// llm-compressor's W8A8 / FP8_DYNAMIC / FP8_BLOCK presets as compressed-tensors, read back
// with their activations declared.
TEST(QuantExport, W8A8SchemesReadBackWithTheirActivations) {
  struct Case {
    const char* name;
    formats::Layout layout;
    formats::ActType act;
    formats::ActStrategy strategy;
    int64_t block;
  };
  for (const Case& c :
       {Case{"w8a8", formats::Layout::kCtInt, formats::ActType::kInt8, formats::ActStrategy::kToken,
             0},
        Case{"fp8", formats::Layout::kFp8, formats::ActType::kFp8, formats::ActStrategy::kToken, 0},
        Case{"fp8-block", formats::Layout::kFp8, formats::ActType::kFp8,
             formats::ActStrategy::kGroup, 128}}) {
    SCOPED_TRACE(c.name);
    auto spec = parse_int_quant_spec(c.name);
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    EXPECT_EQ(int_quant_spec_name(*spec), c.name);
    EXPECT_FALSE(make_quantization_config(ExportFormat::kAutoRound, *spec, {}).ok());
    auto qc = make_quantization_config(ExportFormat::kCompressedTensors, *spec, {});
    ASSERT_TRUE(qc.ok()) << qc.status().to_string();
    auto parsed = parse_quant_config(*qc, "test");
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    const formats::QuantScheme s = parsed->scheme_for("model.layers.0.mlp.up_proj");
    EXPECT_EQ(s.layout, c.layout);
    EXPECT_EQ(s.act.type, c.act);
    EXPECT_TRUE(s.act.dynamic);
    EXPECT_EQ(s.act.strategy, c.strategy);
    EXPECT_EQ(s.block_k, c.block);
    EXPECT_FALSE(parsed->scheme_for("lm_head").quantized());
  }
}

LinearReport report(const std::string& name, int64_t n, int64_t k, bool quantized) {
  LinearReport r;
  r.name = name;
  r.scheme = quantized ? "gptq int4 g32 sym zero-1" : "dense";
  r.kernel = quantized ? "int4 g32 (test)" : "bf16 (test)";
  r.quantized = quantized;
  r.n = n;
  r.k = k;
  r.stored_elements = quantized ? n * k / 8 + n * k / 32 : n * k;  // codes in i32 + scales
  r.stored_bytes = quantized ? n * k / 2 + n * k / 16 : n * k * 2;
  r.resident_bytes = r.stored_bytes + 64;
  return r;
}

// The line of `text` that contains `part`, or "".
std::string line_with(const std::string& text, const std::string& part) {
  const size_t at = text.find(part);
  if (at == std::string::npos) return "";
  const size_t start = text.rfind('\n', at) + 1;  // npos + 1 = 0 on the first line
  return text.substr(start, text.find('\n', at) - start);
}

TEST(InspectQuantSection, CollapsesLayersAndCountsLogicalParameters) {
  const std::string dir = std::filesystem::temp_directory_path() / "qs_quant_export_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"architectures": ["LlamaForCausalLM"],
      "quantization_config": {"quant_method": "auto-round", "bits": 4, "group_size": 32,
                              "sym": true, "packing_format": "auto_round:auto_gptq"}})";
  ASSERT_TRUE(
      write_safetensors(dir + "/model.safetensors", {{"x", Tensor::zeros(DType::kBF16, {10})}})
          .ok());
  auto s = summarize_checkpoint(dir);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->quant_method, "auto-round");

  std::vector<LinearReport> linears;
  for (int layer = 0; layer < 12; ++layer) {
    linears.push_back(
        report("model.layers." + std::to_string(layer) + ".self_attn.q_proj", 64, 64, true));
    // Layer 3 keeps its down_proj in 16 bits: a row of its own, the others show their ranges.
    linears.push_back(
        report("model.layers." + std::to_string(layer) + ".mlp.down_proj", 64, 128, layer != 3));
  }
  linears.push_back(report("lm_head", 256, 64, false));
  int64_t logical = s->n_stored_elements, stored_quantized = 0;
  for (const auto& l : linears) {
    if (l.quantized) {
      logical += l.n * l.k;
      stored_quantized += l.stored_elements;
    }
  }
  set_loaded_linears(&*s, linears, 12345);
  EXPECT_EQ(s->n_parameters, logical - stored_quantized);

  const std::string text = summary_to_text(*s);
  EXPECT_NE(line_with(text, "  model.layers.*.self_attn.q_proj ").find(" x12 "), std::string::npos)
      << text;
  EXPECT_NE(line_with(text, "  model.layers.[0-2,4-11].mlp.down_proj ").find(" x11 "),
            std::string::npos)
      << text;
  EXPECT_NE(line_with(text, "  model.layers.3.mlp.down_proj ").find(" x1 "), std::string::npos)
      << text;
  EXPECT_NE(line_with(text, "  lm_head ").find("bf16 (test)"), std::string::npos) << text;
  EXPECT_NE(text.find("quantized linears counted as n x k"), std::string::npos) << text;
  EXPECT_NE(text.find("model weights resident:    12.1 KiB (12345 bytes)"), std::string::npos)
      << text;

  const json j = summary_to_json(*s);
  EXPECT_EQ(j["parameters"], s->n_parameters);
  EXPECT_EQ(j["stored_elements"], 10);
  const json& q = j["quantization"];
  ASSERT_EQ(q["linears"].size(), linears.size());  // JSON keeps every layer
  EXPECT_EQ(q["linears"][7]["name"], "model.layers.3.mlp.down_proj");
  EXPECT_EQ(q["linears"][7]["quantized"], false);
  uint64_t bf16 = 0;
  for (const auto& l : linears) bf16 += l.bf16_bytes();
  EXPECT_EQ(q["linear_bf16_bytes"], bf16);
  EXPECT_EQ(q["model_bf16_bytes"], s->n_parameters * 2);
  EXPECT_EQ(q["model_resident_bytes"], 12345);
}

}  // namespace
}  // namespace qs::io
