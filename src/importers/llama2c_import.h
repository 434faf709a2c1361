// importers: importer for Karpathy's llama2.c legacy `.bin` checkpoints (export version 0, as
// `run.c` reads them). It writes a Hugging Face LlamaForCausalLM directory (config.json,
// generation_config.json, model.safetensors, f32) that any HF-convention forward reproduces:
// the q/k rows are permuted from llama2.c's interleaved RoPE pairs to HF's rotate-half.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::importers {

// The 7-int32 header of a legacy llama2.c checkpoint.
struct Llama2cConfig {
  int64_t dim = 0;
  int64_t hidden_dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;         // always positive here; the sign in the file is
  bool shared_classifier = true;  // ... this flag: negative means a separate wcls follows
  int64_t seq_len = 0;

  int64_t head_size() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_size(); }
};

// Reads and validates the header of `bin_path`, including that the file size is exactly what
// the header implies (weights, the two freq_cis tables, and wcls when not shared).
Result<Llama2cConfig> read_llama2c_config(const std::string& bin_path);

// Reorders the rows of a q or k projection `w` [n_heads * head_size, cols] (row-major f32)
// from llama2.c's RoPE convention, which rotates pairs (2i, 2i+1) of each head, to HF's
// rotate-half convention, which rotates (i, i + head_size/2). This is the `permute` of
// transformers' convert_llama_weights_to_hf.py: out row h*hs + p*hs/2 + i = in row
// h*hs + 2i + p.
std::vector<float> permute_rows_to_rotate_half(const float* w, int64_t n_heads, int64_t head_size,
                                               int64_t cols);

// config.json of the imported model (LlamaForCausalLM, f32, bos 1, eos 2).
nlohmann::json llama2c_hf_config(const Llama2cConfig& config);

// Converts `bin_path` into `out_dir` (created if needed): config.json,
// generation_config.json and model.safetensors. Tokenizer files are not written here.
Status import_llama2c_weights(const std::string& bin_path, const std::string& out_dir);

}  // namespace qs::importers
