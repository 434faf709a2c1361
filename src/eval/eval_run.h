// eval: one evaluation as the CLI runs it (`quantserve eval`, `quantserve quantize --verify`):
// load the model (and reference), read and tokenize the dataset with the model's tokenizer,
// evaluate, and report as JSON and as a one-row markdown table.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "models/model.h"

namespace qs::eval {

struct EvalRequest {
  std::string model_dir;
  std::string reference_dir;  // empty: perplexity only
  std::string dataset;        // .txt or .jsonl (io/text_dataset.h)
  int64_t seqlen = 0;         // 0: min(2048, max_position_embeddings of the models)
  int64_t max_tokens = 0;     // 0: the whole text
  int threads = 1;
  models::LoadOptions load;
  DType kv_cache_dtype = DType::kF32;  // --kv-cache-dtype (of the evaluated model)
  DType reference_kv_cache_dtype = DType::kF32;
};

// The held-out text shipped with the project: the first 406 lines of WikiText-2's test split.
std::string default_eval_dataset();

// Runs the request. The JSON holds the request, the token counts and every EvalReport field
// (reference ones only with a reference).
Result<nlohmann::json> run_eval(const EvalRequest& request);

// One markdown table (header + row) of a run_eval result.
void print_eval_table(const nlohmann::json& result, FILE* out);

}  // namespace qs::eval
