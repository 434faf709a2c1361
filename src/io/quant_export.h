// io: the metadata an exporter writes beside packed int weights: the `quantization_config`
// dicts of the formats other engines read (AutoRound, GPTQ, AWQ, compressed-tensors), as
// auto-round 0.16 writes them (../shared/reference/autoround.md §3.1, §3.5;
// vllm-serving.md §2). Reading one back with io::parse_quant_config gives the scheme of every
// layer, so a writer packs each layer with exactly what readers will expect.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/quant_scheme.h"

namespace qs::io {

// What `autoround_version` says in what we write: the release whose export we follow.
inline constexpr const char* kAutoRoundVersion = "0.16.1";

// The export formats of auto-round's --format.
enum class ExportFormat {
  kAutoRound,  // quant_method auto-round; GPTQ layout, zero-1 when sym, true zeros when asym
  kAutoGptq,   // quant_method gptq, checkpoint_format gptq (v1, zero-1), g_idx written
  kAutoAwq,    // quant_method awq, version gemm, 4-bit only
  kCompressedTensors,  // compressed-tensors pack-quantized (W4A16 / W8A16 presets)
};

// "auto_round", "auto_gptq", "auto_awq", "compressed-tensors" (also "compressed_tensors",
// "llm_compressor"); the error lists them.
Result<ExportFormat> parse_export_format(const std::string& name);
const char* export_format_name(ExportFormat format);

// A weight-only integer scheme as users name it: "w4g128" (symmetric), "w4g128-asym",
// "w8" (per output channel), "w3g128", ...
// Also the W8A8 schemes of llm-compressor's presets, written as compressed-tensors only:
// "w8a8" (int8 per-channel weights, dynamic per-token int8 activations: W8A8), "fp8" (fp8
// e4m3 per-channel weights, dynamic per-token fp8 activations: FP8_DYNAMIC) and "fp8-block"
// (128 x 128 weight blocks, dynamic 1 x 128 activation groups: FP8_BLOCK).
struct IntQuantSpec {
  int bits = 4;
  int64_t group_size = 128;  // -1 = one group per output channel
  bool sym = true;
  bool fp8 = false;          // e4m3 weights (bits 8)
  int64_t block = 0;         // fp8 block x block weight scales; 0 = per channel
  formats::ActScheme act{};  // declared activation quantization (none: weight-only)

  bool needs_compressed_tensors() const { return fp8 || act.quantized(); }
};

// "w<bits>[g<group>][-sym|-asym]" with bits 2, 3, 4 or 8 and group > 0; no g = per channel;
// or "w8a8", "fp8", "fp8-block".
Result<IntQuantSpec> parse_int_quant_spec(const std::string& name);
// The name parse_int_quant_spec reads back: "w4g128", "w8", "w4g128-asym".
std::string int_quant_spec_name(const IntQuantSpec& spec);

// AutoRound keeps an int weight-only layer at 16 bits when out or in is not a multiple of 32
// (its packer needs whole words; autoround.md §1.2). Such layers go in `dense_modules` below.
bool int_packable(int64_t n, int64_t k);

// The quantization_config of a checkpoint whose linear modules under `blocks` ("model.layers";
// a FLUX transformer's "transformer_blocks", "single_transformer_blocks": auto_round only,
// as block_name_to_quantize) are quantized with `spec`, except `dense_modules` (full module
// names) which stay 16-bit, as do lm_head and the embeddings. Each format lists the exceptions its
// own way (AutoRound extra_config, GPTQModel dynamic "-:", AWQ modules_to_not_convert,
// compressed-tensors ignore). Errors: a spec the format cannot store (awq: 4-bit only).
Result<nlohmann::json> make_quantization_config(ExportFormat format, const IntQuantSpec& spec,
                                                const std::vector<std::string>& dense_modules,
                                                const std::vector<std::string>& blocks = {
                                                    "model.layers"});

}  // namespace qs::io
