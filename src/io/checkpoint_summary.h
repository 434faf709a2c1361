// io: what `quantserve inspect` reports about a checkpoint directory: the architecture and
// hyper-parameters from config.json, and per-dtype tensor counts, element counts and bytes
// from the safetensors headers. Nothing here converts or checks weight values.
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
  int64_t n_parameters = 0;
  uint64_t total_bytes = 0;                  // tensor bytes, without headers
  std::map<std::string, DTypeUsage> dtypes;  // by safetensors name ("F32", "BF16", ...)
};

// Reads <dir>/config.json (required) and the checkpoint's safetensors headers.
Result<CheckpointSummary> summarize_checkpoint(const std::string& dir);

// Machine-readable form, the output of `quantserve inspect --json`.
nlohmann::json summary_to_json(const CheckpointSummary& summary);
// Human-readable form: one "key: value" line per item, sizes in MiB/GiB with exact bytes.
std::string summary_to_text(const CheckpointSummary& summary);

}  // namespace qs::io
