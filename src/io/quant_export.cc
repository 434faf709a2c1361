// io: quantization_config writers for make-model --quantize (and, later, the quantizer).
#include "io/quant_export.h"

#include <cstdlib>
#include <string_view>

namespace qs::io {
namespace {

using nlohmann::json;

// Anchored regex matching exactly `name` (module names hold [A-Za-z0-9_.] only, but escape
// every metacharacter anyway).
std::string exact_regex(const std::string& name) {
  std::string out = "^";
  for (char c : name) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out + "$";
}

// Parses the decimal digits of s[*pos...], advancing *pos; -1 when there are none.
int64_t take_number(const std::string& s, size_t* pos) {
  size_t end = *pos;
  while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
  if (end == *pos || end - *pos > 9) return -1;
  const int64_t v = std::strtoll(s.substr(*pos, end - *pos).c_str(), nullptr, 10);
  *pos = end;
  return v;
}

json auto_round_config(const IntQuantSpec& spec, const std::vector<std::string>& dense,
                       const std::vector<std::string>& blocks) {
  std::string block_names;
  for (const std::string& b : blocks) block_names += (block_names.empty() ? "" : ",") + b;
  // As auto-round's export picks (autoround.md §3.1): full-range sym keeps zero 2^(b-1), which
  // GPTQ v1 stores as zero-1 (auto_round:auto_gptq); asym zeros may be 0, which v1 cannot
  // store, so 4-bit asym goes to the AWQ layout and other asym widths to the GPTQ layout with
  // true zeros ("auto_round").
  const char* packing =
      spec.sym ? "auto_round:auto_gptq" : (spec.bits == 4 ? "auto_round:auto_awq" : "auto_round");
  json qc = {{"quant_method", "auto-round"},
             {"packing_format", packing},
             {"bits", spec.bits},
             {"group_size", spec.group_size},
             {"sym", spec.sym},
             {"data_type", "int"},
             {"block_name_to_quantize", block_names},
             {"autoround_version", kAutoRoundVersion},
             // What auto-round writes for RTN (iters=0), the only rounding make-model does.
             {"iters", 0}};
  if (!dense.empty()) {
    json extra = json::object();
    for (const auto& m : dense) extra[m] = {{"bits", 16}, {"data_type", "fp"}};
    qc["extra_config"] = extra;
  }
  return qc;
}

json gptq_config(const IntQuantSpec& spec, const std::vector<std::string>& dense) {
  json qc = {{"quant_method", "gptq"},   {"checkpoint_format", "gptq"},
             {"bits", spec.bits},        {"group_size", spec.group_size},
             {"sym", spec.sym},          {"desc_act", false},
             {"static_groups", false},   {"true_sequential", false},
             {"damp_percent", 0.01},     {"lm_head", false},
             {"provider", "auto-round"}, {"autoround_version", kAutoRoundVersion}};
  if (!dense.empty()) {
    json dynamic = json::object();
    for (const auto& m : dense) dynamic["-:" + exact_regex(m)] = json::object();
    qc["dynamic"] = dynamic;
  }
  return qc;
}

json awq_config(const IntQuantSpec& spec, const std::vector<std::string>& dense) {
  // modules_to_not_convert matches by substring; full module names match only themselves
  // ("layers.1." is not inside "layers.11."). lm_head is listed so no reader quantizes it.
  // "sym" and "data_type" as auto-round writes them: its loader reads "sym" (default true)
  // rather than zero_point, and without it ran an asym checkpoint as sym (found by the
  // quantserve-made fixtures in tests/golden/fixtures/quant).
  json skip = json::array({"lm_head"});
  for (const auto& m : dense) skip.push_back(m);
  return {{"quant_method", "awq"},    {"version", "gemm"},
          {"bits", spec.bits},        {"group_size", spec.group_size},
          {"zero_point", !spec.sym},  {"sym", spec.sym},
          {"data_type", "int"},       {"modules_to_not_convert", skip},
          {"provider", "auto-round"}, {"autoround_version", kAutoRoundVersion}};
}

json compressed_tensors_config(const IntQuantSpec& spec, const std::vector<std::string>& dense) {
  // llm-compressor's W4A16 / W8A16 / W8A8 / FP8_DYNAMIC / FP8_BLOCK presets: one config
  // group over every Linear.
  const char* strategy = spec.block > 0 ? "block" : spec.group_size > 0 ? "group" : "channel";
  json weights = {
      {"num_bits", spec.bits},
      {"type", spec.fp8 ? "float" : "int"},
      {"symmetric", spec.sym},
      {"strategy", strategy},
      {"group_size", spec.group_size > 0 ? json(spec.group_size) : json(nullptr)},
      {"dynamic", false},
      {"actorder", nullptr},
      {"block_structure", spec.block > 0 ? json::array({spec.block, spec.block}) : json(nullptr)},
      {"observer", "minmax"},
      {"observer_kwargs", json::object()}};
  json acts = nullptr;
  if (spec.act.quantized()) {
    const bool group = spec.act.strategy == formats::ActStrategy::kGroup;
    acts = {{"num_bits", 8},
            {"type", spec.act.type == formats::ActType::kFp8 ? "float" : "int"},
            {"symmetric", spec.act.sym},
            {"strategy", group ? "group" : "token"},
            {"group_size", group ? json(spec.act.group_size) : json(nullptr)},
            {"dynamic", true},
            {"actorder", nullptr},
            {"block_structure", nullptr},
            {"observer", nullptr},
            {"observer_kwargs", json::object()}};
  }
  const char* format = spec.fp8               ? "float-quantized"
                       : spec.act.quantized() ? "int-quantized"
                                              : "pack-quantized";
  json ignore = json::array({"lm_head"});
  for (const auto& m : dense) ignore.push_back(m);
  json group = {{"targets", json::array({"Linear"})},
                {"weights", weights},
                {"input_activations", acts},
                {"output_activations", nullptr},
                {"format", format}};
  json qc = {{"quant_method", "compressed-tensors"}, {"format", format},
             {"quantization_status", "compressed"},  {"ignore", ignore},
             {"kv_cache_scheme", nullptr},           {"global_compression_ratio", nullptr},
             {"sparsity_config", json::object()},    {"provider", "auto-round"}};
  qc["config_groups"] = json::object({{"group_0", group}});
  return qc;
}

}  // namespace

Result<ExportFormat> parse_export_format(const std::string& name) {
  if (name == "auto_round" || name == "auto-round") return ExportFormat::kAutoRound;
  if (name == "auto_gptq" || name == "gptq") return ExportFormat::kAutoGptq;
  if (name == "auto_awq" || name == "awq") return ExportFormat::kAutoAwq;
  if (name == "compressed-tensors" || name == "compressed_tensors" || name == "llm_compressor") {
    return ExportFormat::kCompressedTensors;
  }
  return invalid_argument("unknown export format '" + name +
                          "' (known: auto_round, auto_gptq, auto_awq, compressed-tensors)");
}

const char* export_format_name(ExportFormat format) {
  switch (format) {
    case ExportFormat::kAutoRound:
      return "auto_round";
    case ExportFormat::kAutoGptq:
      return "auto_gptq";
    case ExportFormat::kAutoAwq:
      return "auto_awq";
    case ExportFormat::kCompressedTensors:
      return "compressed-tensors";
  }
  return "?";
}

Result<IntQuantSpec> parse_int_quant_spec(const std::string& name) {
  const auto bad = [&](const std::string& why) {
    return invalid_argument(
        "quantization scheme '" + name + "': " + why +
        " (expected w<bits>[g<group>][-asym], e.g. w4g128, w4g128-asym, w8; or w8a8, fp8, "
        "fp8-block)");
  };
  IntQuantSpec spec;
  if (name == "w8a8" || name == "fp8" || name == "fp8-block") {
    spec.bits = 8;
    spec.group_size = -1;
    spec.fp8 = name != "w8a8";
    spec.act.type = spec.fp8 ? formats::ActType::kFp8 : formats::ActType::kInt8;
    spec.act.dynamic = true;
    spec.act.strategy = formats::ActStrategy::kToken;
    if (name == "fp8-block") {
      spec.block = 128;
      spec.group_size = 0;
      spec.act.strategy = formats::ActStrategy::kGroup;
      spec.act.group_size = 128;
    }
    return spec;
  }
  size_t pos = 0;
  if (name.empty() || name[pos] != 'w') return bad("does not start with 'w'");
  ++pos;
  const int64_t bits = take_number(name, &pos);
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8) return bad("bits must be 2, 3, 4 or 8");
  spec.bits = static_cast<int>(bits);
  spec.group_size = -1;
  if (pos < name.size() && name[pos] == 'g') {
    ++pos;
    spec.group_size = take_number(name, &pos);
    if (spec.group_size <= 0) return bad("group size must be a positive number");
  }
  const std::string rest = name.substr(pos);
  if (rest == "-asym") {
    spec.sym = false;
  } else if (!rest.empty() && rest != "-sym") {
    return bad("unexpected '" + rest + "'");
  }
  return spec;
}

std::string int_quant_spec_name(const IntQuantSpec& spec) {
  if (spec.fp8) return spec.block > 0 ? "fp8-block" : "fp8";
  if (spec.act.quantized()) return "w8a8";
  std::string s = "w" + std::to_string(spec.bits);
  if (spec.group_size > 0) s += "g" + std::to_string(spec.group_size);
  if (!spec.sym) s += "-asym";
  return s;
}

bool int_packable(int64_t n, int64_t k) {
  return n % 32 == 0 && k % 32 == 0;
}

Result<json> make_quantization_config(ExportFormat format, const IntQuantSpec& spec,
                                      const std::vector<std::string>& dense_modules,
                                      const std::vector<std::string>& blocks) {
  if (blocks.empty()) return invalid_argument("no block to quantize");
  if (format != ExportFormat::kAutoRound && blocks != std::vector<std::string>{"model.layers"}) {
    // The other formats say which linears stay 16-bit, not which blocks are quantized.
    return invalid_argument(std::string("blocks other than model.layers are written as "
                                        "auto_round only, not ") +
                            export_format_name(format));
  }
  if (spec.needs_compressed_tensors() && format != ExportFormat::kCompressedTensors) {
    return invalid_argument(int_quant_spec_name(spec) +
                            " is written as compressed-tensors only, not " +
                            export_format_name(format));
  }
  switch (format) {
    case ExportFormat::kAutoRound:
      return auto_round_config(spec, dense_modules, blocks);
    case ExportFormat::kAutoGptq:
      return gptq_config(spec, dense_modules);
    case ExportFormat::kAutoAwq:
      if (spec.bits != 4) {
        return invalid_argument("auto_awq stores 4-bit weights only; " + int_quant_spec_name(spec) +
                                " has " + std::to_string(spec.bits) +
                                " bits (use auto_round or auto_gptq)");
      }
      return awq_config(spec, dense_modules);
    case ExportFormat::kCompressedTensors:
      return compressed_tensors_config(spec, dense_modules);
  }
  return internal_error("unhandled export format");
}

}  // namespace qs::io
