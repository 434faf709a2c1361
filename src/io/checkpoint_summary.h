// io: what `quantserve inspect` reports about a checkpoint directory: the architecture and
// hyper-parameters from config.json, per-dtype tensor counts, element counts and bytes from
// the safetensors headers, and the detected quantization. Nothing here converts or checks
// weight values; the per-layer quantization rows come from the loaded model (apps fills them).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::io {

struct DTypeUsage {
  int64_t n_tensors = 0;
  int64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

// One matmul as the loader made it resident (from models::Model::linears()).
struct LinearReport {
  std::string name;    // "model.layers.0.self_attn.q_proj", "lm_head"
  std::string scheme;  // as stored: formats::QuantScheme::describe(), "dense" for 16-bit
  std::string kernel;  // what runs it: ops::LinearWeight::kernel()
  bool quantized = false;
  int64_t n = 0, k = 0;         // W[n, k]
  int64_t stored_elements = 0;  // elements of its stored tensors (bias excluded)
  uint64_t stored_bytes = 0;    // its tensors' bytes in the checkpoint (bias excluded)
  uint64_t resident_bytes = 0;  // bytes it holds in memory once loaded
  uint64_t bf16_bytes() const { return static_cast<uint64_t>(n) * k * 2; }
};

struct CheckpointSummary {
  std::string dir;
  std::string architecture;  // config.json "architectures"[0], "" when absent
  std::string model_type;    // config.json "model_type", "" when absent
  // The hyper-parameters config.json sets, among the well-known ones (hidden_size, ...), in a
  // fixed order; values kept as JSON (numbers, booleans, strings, objects like rope_scaling).
  std::vector<std::pair<std::string, nlohmann::json>> hyper_parameters;
  std::vector<std::string> files;  // the safetensors files, sorted
  int64_t n_tensors = 0;
  // Stored elements, summed over tensors. For unquantized checkpoints this is the parameter
  // count (tied embeddings are stored, and counted, once).
  int64_t n_stored_elements = 0;
  // Logical parameters: stored elements, except that a quantized linear counts as its n x k
  // weight instead of its packed codes, scales and zeros (set_loaded_linears fixes it up).
  int64_t n_parameters = 0;
  uint64_t total_bytes = 0;                  // tensor bytes, without headers
  std::map<std::string, DTypeUsage> dtypes;  // by safetensors name ("F32", "BF16", ...)

  // Detected quantization (io/quant_config.h): method "" = not quantized.
  std::string quant_method;
  std::string quant_summary;             // QuantConfig::summary()
  std::vector<std::string> quant_notes;  // QuantConfig::notes(): facts that do not change loading
  // Every matmul of the loaded model, in forward order; empty unless set_loaded_linears ran
  // (inspect loads the model only for quantized checkpoints).
  std::vector<LinearReport> linears;
  uint64_t model_resident_bytes = 0;  // models::Model::resident_weight_bytes()
  // models::Model::decode_weight_bytes(): what one decode step of one sequence reads; below
  // the resident bytes for MoE models (only the routed experts' share) and untied embeddings.
  uint64_t decode_bytes_per_token = 0;
  // MoE models: the parameters one token runs through (its top-k experts), and how it is
  // counted; 0 for dense models. Set by the caller, which knows the model families.
  int64_t active_parameters = 0;
  std::string active_note;
};

// Reads <dir>/config.json (required) and the checkpoint's safetensors headers.
Result<CheckpointSummary> summarize_checkpoint(const std::string& dir);

// Records the loaded model's matmuls and resident weight bytes, and recomputes n_parameters
// with every quantized linear counted as n x k.
void set_loaded_linears(CheckpointSummary* summary, std::vector<LinearReport> linears,
                        uint64_t model_resident_bytes);

// Machine-readable form, the output of `quantserve inspect --json`.
nlohmann::json summary_to_json(const CheckpointSummary& summary);
// Human-readable form: one "key: value" line per item, sizes in MiB/GiB with exact bytes; the
// per-layer quantization table collapses layers that differ only in their index.
std::string summary_to_text(const CheckpointSummary& summary);

}  // namespace qs::io
