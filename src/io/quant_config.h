// io: detection of how a checkpoint is quantized, from its quantization_config (config.json,
// else compression_config / text_config.quantization_config, else quantization_config.json,
// quantize_config.json or quant_config.json beside it), normalized as vLLM does (see
// ../shared/reference/vllm-serving.md §1, autoround.md §3). It decides the scheme of every
// linear module by name; the loader then checks the tensors against it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/quant_scheme.h"

namespace qs::io {

class QuantConfig {
 public:
  // Method as normalized: "" (not quantized), "auto-round", "gptq", "awq",
  // "compressed-tensors", "fp8".
  const std::string& method() const { return method_; }
  bool quantized() const { return !method_.empty(); }
  // Where the metadata came from ("config.json", "quantization_config.json", ...).
  const std::string& source() const { return source_; }
  // The scheme of the bulk of the layers (what `inspect` prints first).
  const formats::QuantScheme& default_scheme() const { return default_; }
  // The storage format as normalized: AutoRound packing_format ("auto_round:auto_gptq",
  // "auto_round:auto_awq", "auto_round", "auto_round:fp8"), GPTQ checkpoint_format ("gptq",
  // "gptq_v2"), AWQ version ("gemm"), compressed-tensors format ("pack-quantized", ...);
  // "" for fp8 and unquantized checkpoints.
  const std::string& format() const { return format_; }
  // Facts worth one log line each that do not change how weights load: activation
  // quantization we do not apply (we compute in f32), a kv_cache_scheme, keys we ignore.
  const std::vector<std::string>& notes() const { return notes_; }

  // The scheme of the linear module `module` (full name without ".weight", e.g.
  // "model.layers.3.mlp.down_proj", "lm_head"), after every per-layer rule: extra_config
  // (exact name, then regex search; bits >= 16 = dense), block_name_to_quantize,
  // modules_to_not_convert / ignore (substring, or "re:" regex for compressed-tensors),
  // compressed-tensors config_groups targets, GPTQModel `dynamic` (+:/-: regex), lm_head.
  formats::QuantScheme scheme_for(const std::string& module) const;

  // The same config read by a model whose tensors sit under `prefix` in the checkpoint (a
  // full Qwen2.5-Omni's "thinker.", see io::Checkpoint::rooted). The producers write module
  // names as stored (block_name_to_quantize "thinker.model.layers", extra_config
  // "thinker.lm_head"); the model asks by its own names ("model.layers.0.mlp.up_proj",
  // "lm_head"). scheme_for() then tries each rule on the stored name and on the model's own
  // (our implied rules, "lm_head" and the default blocks, speak the model's names); a name
  // written for another part of the checkpoint (talker.) matches neither.
  QuantConfig rooted(const std::string& prefix) const;
  const std::string& root() const { return root_; }

  // One line for logs: "auto-round (auto_round:auto_gptq) int4 g128 sym, from config.json".
  std::string summary() const;

  const nlohmann::json& raw() const { return raw_; }

  struct Rule;  // one per-layer rule; opaque, defined in quant_config.cc

 private:
  friend Result<QuantConfig> parse_quant_config(const nlohmann::json&, const std::string&);
  std::string method_, source_, format_;
  std::string root_;  // see rooted()
  std::vector<std::string> notes_;
  formats::QuantScheme default_;
  std::vector<std::shared_ptr<const Rule>> rules_;  // per-layer overrides, in priority order
  nlohmann::json raw_;
};

// Parses one quantization_config object (`source` names where it came from, for messages).
// Unknown quant_method, unknown packing/format values, bits/group sizes outside what the
// layout supports and contradictory keys are errors that quote the key and value.
Result<QuantConfig> parse_quant_config(const nlohmann::json& qc, const std::string& source);

// Finds and parses the quantization metadata of the checkpoint in `dir` whose parsed
// config.json is `config`. No metadata anywhere = an unquantized QuantConfig (method "").
Result<QuantConfig> load_quant_config(const std::string& dir, const nlohmann::json& config);

// vLLM's rule for --quantization NAME: accepted when NAME names the detected method or one of
// its aliases/kernels (auto-round: auto_round, autoround, intel/auto-round, inc; gptq:
// gptq_marlin, marlin; awq: awq_marlin; compressed-tensors: compressed_tensors; fp8); otherwise
// an error "--quantization X does not match the checkpoint's quantization method Y". For an
// unquantized checkpoint any NAME is an error (we do not quantize at load).
Status check_requested_quantization(const QuantConfig& detected, const std::string& requested);

}  // namespace qs::io
