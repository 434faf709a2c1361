// importers: importer for llama2.c's tokenizer.bin. It becomes a real SentencePiece
// `tokenizer.model` (BPE, byte fallback) plus HF's tokenizer_config.json and
// special_tokens_map.json, so that quantserve, sentencepiece and HF's LlamaTokenizer all read
// the imported directory and encode text to the ids llama2.c's own encoder gives.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/sentencepiece_model.h"

namespace qs::importers {

// Reads tokenizer.bin: int32 max_token_length, then until end of file one record per token
// (f32 score, int32 length, that many bytes). llama2.c writes " " where SentencePiece has
// "▁", and BOS/EOS as "\n<s>\n" / "\n</s>\n"; both are mapped back. Piece types: <unk>
// UNKNOWN, <s> </s> CONTROL, <0xXX> BYTE, everything else NORMAL.
Result<tok::SpmModel> read_llama2c_tokenizer(const std::string& tok_bin_path);

// Writes `out_dir`/tokenizer.model (the serialized `model`), tokenizer_config.json
// (LlamaTokenizer; add_bos_token when the model has a BOS; `extra_config`'s keys added or
// overriding, e.g. chat_template) and special_tokens_map.json. `out_dir` is created if needed.
// The GGUF importer writes SentencePiece vocabularies through this too.
Status write_spm_tokenizer_files(const tok::SpmModel& model, const nlohmann::json& extra_config,
                                 const std::string& out_dir);

// Writes `out_dir`/tokenizer.model, tokenizer_config.json (LlamaTokenizer, add_bos_token
// true) and special_tokens_map.json. `out_dir` is created if needed.
Status import_llama2c_tokenizer(const std::string& tok_bin_path, const std::string& out_dir);

}  // namespace qs::importers
