// importers: importer for the vocabulary a GGUF file carries (tokenizer.ggml.*). A "gpt2"
// vocabulary (byte-level BPE with merges, e.g. SmolLM2) becomes an HF tokenizer.json whose
// pre-tokenizer is the one llama.cpp applies for tokenizer.ggml.pre; a "llama" vocabulary
// (SentencePiece BPE with scores, e.g. llama2.c models) becomes a SentencePiece
// tokenizer.model, the only form that keeps its scores. Both get tokenizer_config.json with
// BOS/EOS/UNK/PAD, add_bos_token and tokenizer.chat_template.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/gguf.h"

namespace qs::importers {

// The tokenizer.json of a "gpt2" GGUF vocabulary. Errors name the key that is missing or
// inconsistent; pre-tokenizers other than default/gpt-2/smollm/llama-bpe/qwen2 are refused.
Result<nlohmann::json> gguf_bpe_tokenizer_json(const io::GgufFile& gguf);

// Writes the tokenizer files of `gguf` into `out_dir` (created if needed).
Status import_gguf_tokenizer(const io::GgufFile& gguf, const std::string& out_dir);

}  // namespace qs::importers
