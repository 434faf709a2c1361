// importers: importer for Llama-architecture GGUF files (general.architecture "llama": Llama,
// SmolLM2, TinyStories models converted by llama.cpp). It writes the Hugging Face directory
// every other command reads: config.json from the llama.* keys, generation_config.json from
// the tokenizer ids, and model.safetensors with HF tensor names, every tensor dequantized to
// `dtype` (block quants are lossy already; dequantizing them is exact up to the output dtype).
// llama.cpp's convert_hf_to_gguf permutes the rows of attn_q/attn_k so that ggml's RoPE can
// rotate adjacent pairs (2i, 2i+1); the HF forward rotates halves (i, i + head_dim/2), so
// those rows are permuted back. Tokenizer files are written by importers::import_gguf_tokenizer.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"
#include "io/gguf.h"

namespace qs::importers {

// config.json of the model (LlamaForCausalLM) from the llama.* metadata. Errors name the
// missing or inconsistent key; rope scaling other than none is refused (not yet supported).
Result<nlohmann::json> gguf_llama_hf_config(const io::GgufFile& gguf, DType dtype);

// The HF name of a GGUF llama tensor ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.
// q_proj.weight"), or "" when it has none (rope_freqs.weight, refused by the importer).
std::string gguf_llama_hf_name(const std::string& gguf_name);

// Writes config.json, generation_config.json and model.safetensors of `gguf` into `out_dir`
// (created if needed). `dtype` is kF32 or kBF16. Every tensor the config implies must be
// present with the shape it implies; extra tensors are an error unless they have no HF name.
Status import_gguf_weights(const io::GgufFile& gguf, const std::string& out_dir, DType dtype);

}  // namespace qs::importers
