// quant: the `quantserve quantize` pipeline, spelled like auto-round's CLI. Today it runs the
// pure RTN path (--iters 0 --disable_opt_rtn): auto-round's "model-free mode", shard by shard
// through the source safetensors without building the model (autoround.md §1.5), packing
// every planned linear through formats/ in the chosen export format, with the
// quantization_config of §3.5 in config.json and in quantization_config.json. The output is
// staged in a temporary directory beside the target and renamed into place only when
// complete (staged_output.h). The tuned modes (AutoRound --iters > 0, OPT-RTN) draw their
// calibration samples (calibration.h) and then stop with a "not built yet" error at the one
// call site where the tuner plugs in; nothing is written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/quant_config.h"
#include "io/quant_export.h"
#include "models/model_config.h"

namespace qs::quant {

struct QuantizeOptions {
  std::string model_dir;
  std::string output_dir;
  io::IntQuantSpec spec;  // from --scheme, then --bits/--group_size/--sym/--asym
  io::ExportFormat format = io::ExportFormat::kAutoRound;
  int64_t iters = 200;
  bool disable_opt_rtn = false;
  bool quant_lm_head = false;
  bool overwrite = false;
  // {name_or_pattern: "W8A16" | {"bits": 8, "group_size": 32, "sym": false}}; bits >= 16
  // keeps the layer 16-bit. An exact name wins; otherwise the first key (in sorted order)
  // whose regex is found in the name (auto-round's to_standard_regex: substring match).
  nlohmann::json layer_config = nlohmann::json::object();
  // Calibration, for the tuned modes (calibration.h).
  std::string dataset;
  int64_t nsamples = 128;
  int64_t seqlen = 2048;
  int64_t batch_size = 8;
  uint64_t seed = 42;
};

// --scheme W4A16|W8A16|W3A16|W2A16 (autoround.md §1.8: int, group 128, sym).
Result<io::IntQuantSpec> parse_scheme(const std::string& name);

// What happens to one linear.
struct LayerPlan {
  std::string module;    // "model.layers.0.self_attn.q_proj", "lm_head"
  int64_t n = 0, k = 0;  // [out, in]
  bool quantize = false;
  io::IntQuantSpec spec;  // when quantized
  std::string reason;     // when kept 16-bit: why (shown in the summary)
};

struct QuantPlan {
  std::vector<LayerPlan> layers;  // every linear of the model, in tensor-list order
  nlohmann::json quantization_config;
  io::QuantConfig parsed;  // quantization_config as every reader will detect it
};

// Plans every linear of `config` under `options` (§1.7: block linears quantized, lm_head only
// with --quant_lm_head and never when tied, shapes not multiples of 32 kept 16-bit, AWQ needs
// in % group_size == 0) and writes the quantization_config, read back to check each layer's
// scheme. Errors: unsupported bits, a group size that divides no layer's input size, a
// layer_config entry that is malformed or matches nothing, mixed schemes the format cannot
// store.
Result<QuantPlan> plan_quantization(const QuantizeOptions& options,
                                    const models::ModelConfig& config);

// Validates everything that does not need the model: scheme, format, counts, the output
// location (exists without --overwrite; the source itself).
Status check_options(const QuantizeOptions& options);

struct QuantizeSummary {
  int64_t n_quantized = 0;
  std::vector<std::pair<std::string, std::string>> kept;  // (module, reason)
  uint64_t bytes_before = 0;                              // all tensors of the source
  uint64_t bytes_after = 0;                               // all tensors written
  double seconds = 0;
  std::string scheme;  // "W4A16 (int4 g128 sym) as auto_round:auto_gptq"
};

// Progress of the streaming path: `done` of `total` blocks finished.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

// Runs the pipeline. `cancelled` is polled between tensors (Ctrl-C/SIGTERM): when it returns
// true the run stops with an error and the staging directory is removed.
Result<QuantizeSummary> quantize(const QuantizeOptions& options, const ProgressFn& progress,
                                 const std::function<bool()>& cancelled);

// The summary as a markdown table plus the lists of layers kept 16-bit.
std::string format_summary(const QuantizeSummary& summary);

}  // namespace qs::quant
