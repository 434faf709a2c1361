// quant: the `quantserve quantize` pipeline, spelled like auto-round's CLI. Pure RTN
// (--iters 0 --disable_opt_rtn) is auto-round's "model-free mode": shard by shard through the
// source safetensors without building the model (autoround.md §1.5). The tuned modes, AutoRound
// (--iters > 0) and OPT-RTN (--iters 0), draw calibration samples (calibration.h), load the
// model and run it block by block (§2, pipeline_tuned.cc), then write through the same
// streaming export with each block linear's tuned weight in place of its RTN result. Every
// planned linear is packed through formats/ in the chosen export format, with the
// quantization_config of §3.5 in config.json and in quantization_config.json. The output is
// staged in a temporary directory beside the target and renamed into place only when complete
// (staged_output.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/quantized_weight.h"
#include "io/checkpoint.h"
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
  // AutoRound (TuneOptions): 0 = the tool's defaults.
  double lr = 0;
  double minmax_lr = 0;
  int64_t gradient_accumulate_steps = 1;
  // The calibration forwards and the tuner's products in bf16 (f32 accumulation), as the tool's
  // amp=True (its default: bf16 autocast) computes them; false (--disable_amp) keeps them f32.
  bool amp = true;
  int threads = 1;
};

// --scheme W4A16|W8A16|W3A16|W2A16 (autoround.md §1.8: int, group 128, sym), or one of
// llm-compressor's W8A8 presets (W8A8 int8, FP8_DYNAMIC, FP8_BLOCK: compressed-tensors, RTN).
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

// What plan_quantization plans over, for models that are not decoder LLMs (a diffusion
// transformer): every linear weight, the block prefixes whose linears are quantized, and the
// tied lm_head an LLM may have.
struct LinearSite {
  std::string module;  // without ".weight"
  int64_t n = 0, k = 0;
};
struct PlanTarget {
  std::vector<LinearSite> linears;
  std::vector<std::string> blocks = {"model.layers"};  // block_name_to_quantize
  bool tied_head = false;
  int64_t vocab_size = 0, hidden_size = 0;  // the tied head's shape
  // A linear whose in_features is not a multiple of group_size stays 16-bit in every format
  // (as auto_awq always requires), for models whose readers need whole groups.
  bool whole_groups = false;
  // Modules outside the blocks that extra_config lists as 16-bit with this data_type, as the
  // tool records them for a multimodal checkpoint's towers (pipeline_multimodal.cc).
  std::vector<std::string> listed_16bit;
  std::string listed_data_type = "fp";
};
// The decoder's linears of `config` (expected_tensors), blocks "model.layers".
PlanTarget decoder_target(const models::ModelConfig& config);
Result<QuantPlan> plan_quantization(const QuantizeOptions& options, const PlanTarget& target);

// Validates everything that does not need the model: scheme, format, counts, the output
// location (exists without --overwrite; the source itself).
Status check_options(const QuantizeOptions& options);

// One decoder block of a tuned run (AutoRound or OPT-RTN), or the quantized lm_head after them.
// Losses are the reconstruction MSE against the full-precision block's outputs (for lm_head its
// logits): for AutoRound the tuner's mini-batch losses (initial = RTN), for OPT-RTN the loss over
// the whole calibration set with RTN (initial) and with the searched scales (best).
struct BlockReport {
  std::string layer;  // "" for decoder block `index`; "lm_head" for the layer after the blocks
  int64_t index = 0, total = 0;
  int iter = 0, iters = 0;  // during tuning: the iteration just run
  double initial_loss = 0;
  double best_loss = 0;
  int best_iter = 0;
  double seconds = 0;  // this block so far
  double elapsed = 0;  // the whole tuned run so far
  double eta = 0;      // estimated seconds left for the remaining blocks
  bool done = false;   // false: a progress update during tuning
};
using BlockReportFn = std::function<void(const BlockReport&)>;

struct QuantizeSummary {
  int64_t n_quantized = 0;
  std::vector<std::pair<std::string, std::string>> kept;  // (module, reason)
  uint64_t bytes_before = 0;                              // all tensors of the source
  uint64_t bytes_after = 0;                               // all tensors written
  double seconds = 0;
  std::string scheme;                 // "W4A16 (int4 g128 sym) as auto_round:auto_gptq, AutoRound"
  std::string calibration;            // tuned modes: what was drawn
  std::vector<BlockReport> blocks;    // tuned modes: per block, in order
  std::vector<std::string> unrouted;  // tuned modes: experts no calibration token reached (RTN)
};

// Progress of the streaming path: `done` of `total` blocks finished.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

// Runs the pipeline. `cancelled` is polled between tensors and between tuning blocks
// (Ctrl-C/SIGTERM): when it returns true the run stops with an error and the staging
// directory is removed. `tune_progress` hears each tuning iteration and each finished block of
// the tuned modes.
Result<QuantizeSummary> quantize(const QuantizeOptions& options, const ProgressFn& progress,
                                 const std::function<bool()>& cancelled,
                                 const BlockReportFn& tune_progress = {});

// The tuned modes' block-by-block pass (pipeline_tuned.cc, autoround.md §2): embeds the
// calibration samples, then per block computes the full-precision targets, tunes (AutoRound) or
// scale-searches (OPT-RTN) its planned linears on the quantized chain's inputs, and advances
// both chains. `weights` maps each tuned module ("model.layers.3.mlp.up_proj") to its weight;
// layers the plan keeps 16-bit stay full precision in both chains.
struct TunedModel {
  std::map<std::string, formats::QuantizedWeight> weights;
  std::vector<BlockReport> blocks;
  std::string calibration;
  std::vector<std::string> unrouted;  // MoE experts no calibration token reached: RTN
};
Result<TunedModel> tune_model(const QuantizeOptions& options, const QuantPlan& plan,
                              const std::function<bool()>& cancelled,
                              const BlockReportFn& tune_progress);

// The streaming export: every tensor of `ckpt`, shard by shard in the source's sharding, into
// `out_dir` as `base`.safetensors (or the source's shard names and `base`.safetensors.index.json),
// each planned linear RTN-packed or, when `tuned` has it, packed from its tuned weight; the
// rest copied unchanged. `blocks` orders the tensors and paces `progress`. Adds the counts and
// sizes to `summary`.
Status export_weights(const io::Checkpoint& ckpt, const std::string& base,
                      const std::vector<std::string>& blocks, const QuantizeOptions& options,
                      const QuantPlan& plan, TunedModel* tuned, const std::string& out_dir,
                      const ProgressFn& progress, const std::function<bool()>& cancelled,
                      QuantizeSummary* summary);

// A diffusers pipeline directory (model_index.json): its transformer's blocks RTN-quantized
// (autoround.md §4: every linear of transformer_blocks.* and single_transformer_blocks.*;
// embedders, norm_out, proj_out, the text encoders and the VAE stay 16-bit) as auto_round,
// the other components copied (hard links where the filesystem allows). Called by quantize()
// when --model is a pipeline.
Result<QuantizeSummary> quantize_pipeline(const QuantizeOptions& options,
                                          const ProgressFn& progress,
                                          const std::function<bool()>& cancelled);

// A transformers Whisper directory (config.json model_type "whisper"): every linear of the
// encoder's and decoder's blocks RTN- or OPT-RTN-quantized (imatrix from --dataset audio,
// whisper_calibration.h) as auto_round (block_name_to_quantize
// "model.decoder.layers,model.encoder.layers", as auto-round's model-free mode writes it); the
// convolutions, embeddings, positions, norms and the tied proj_out stay 16-bit, and the
// tokenizer, preprocessor and generation configs are copied. Called by quantize(). Errors:
// AutoRound (--iters > 0), OPT-RTN without audio, another format, --quant_lm_head, a config or
// tensor that is not Whisper's.
Result<QuantizeSummary> quantize_whisper(const QuantizeOptions& options, const ProgressFn& progress,
                                         const std::function<bool()>& cancelled);

// A multimodal checkpoint (a decoder with towers: Qwen2.5-VL, the Qwen2.5-Omni thinker;
// ModelConfig::tower_prefixes): its decoder blocks quantized as an LLM's, tuned on text only;
// the towers' tensors copied unchanged and, as auto-round 0.16 records them, listed in
// extra_config as 16-bit. pipeline_multimodal.cc. Errors: a format other than auto_round, a
// --layer_config key that names a tower's tensor (the tool's quant_nontext_module).
Result<PlanTarget> multimodal_target(const QuantizeOptions& options,
                                     const models::ModelConfig& config, const io::Checkpoint& ckpt);

// "W4A16 (int4 g128 sym)", "FP8_DYNAMIC (...)": the scheme as the summary names it.
std::string scheme_name(const io::IntQuantSpec& spec);

// The summary as a markdown table plus the lists of layers kept 16-bit.
std::string format_summary(const QuantizeSummary& summary);

}  // namespace qs::quant
