// models: the opt-in run-time int8 copy of a 16-bit lm_head (--lm-head-dtype int8). llama.cpp
// stores the output matrix of a tied model as Q8_0 and so streams half the bytes of a bf16 head
// per decode step; this is the same idea on our int8 kernels: one symmetric scale per output row
// (per channel), built once at load. The embedding table is left 16-bit for the lookups.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "formats/quantized_weight.h"
#include "ops/linear.h"

namespace qs::models {

// --lm-head-dtype / LLM(lm_head_dtype=): "auto" (the head as the checkpoint stores it) or "int8".
// Anything else is an invalid_argument that names both.
Status check_lm_head_dtype(const std::string& name);

// w [n, k] (f32, f16 or bf16) per row: scale = max|w_row| / 127 in f32, code = w / scale rounded
// half to even (torch.round), stored unsigned with zero 128 as GPTQ stores int8, so codes lie in
// [1, 255]. An all-zero row gets scale 0 and codes 128. A NaN or infinity is an error naming
// its row.
Result<formats::QuantizedWeight> quantize_int8_rows(const Tensor& w, ThreadPool& pool);

// Replaces a 16-bit `head` (its dense form; panels are dropped) by its int8 per-row QuantMatrix
// and logs one line with the bytes before and after; a head the checkpoint stores quantized is
// left as it is (also one line). `dir` names the checkpoint in the log.
Status make_int8_lm_head(const std::string& dir, ops::LinearWeight* head);

}  // namespace qs::models
