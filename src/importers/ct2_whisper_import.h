// importers: importer for CTranslate2 Whisper models (a folder with model.bin of spec
// WhisperSpec, config.json, tokenizer.json and vocabulary.txt or .json, as
// ct2-transformers-converter and faster-whisper write it). It writes the Hugging Face
// directory that transformers' WhisperForConditionalGeneration and WhisperProcessor load:
// model.safetensors with transformers' names, config.json, generation_config.json,
// preprocessor_config.json and the tokenizer files. CTranslate2 fuses q/k/v (self-attention)
// and k/v (cross-attention) into one linear with a zero k bias that transformers' Whisper has
// no place for; those are split and the k bias dropped after checking that it is zero. Every
// size comes from the tensors' shapes and every token id from tokenizer.json, by name.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"
#include "io/ct2_model.h"

namespace qs::importers {

// What model.bin's shapes and flags say about the model.
struct Ct2WhisperShape {
  int64_t d_model = 0;
  int64_t n_mels = 0;
  int64_t vocab = 0;
  int64_t source_positions = 0;  // encoder positions (1500 for 30 s of audio)
  int64_t target_positions = 0;  // decoder positions (448)
  int64_t encoder_layers = 0;
  int64_t decoder_layers = 0;
  int64_t encoder_heads = 0;
  int64_t decoder_heads = 0;
  int64_t encoder_ffn = 0;
  int64_t decoder_ffn = 0;
  DType stored = DType::kF16;  // dtype of the unquantized float tensors (the layer norms)
};

// Reads the sizes from the tensors' shapes and checks the spec ("WhisperSpec", revision at
// most 3) and the flags the transformers model cannot express (activation, pre-norm,
// embedding scale, ALiBi).
Result<Ct2WhisperShape> ct2_whisper_shape(const io::Ct2Model& model);

// Whisper's special tokens, found by name among tokenizer.json's added tokens.
struct WhisperTokens {
  int64_t end_of_text = -1;
  int64_t start_of_transcript = -1;
  int64_t translate = -1;
  int64_t transcribe = -1;
  int64_t start_of_prev = -1;
  int64_t no_timestamps = -1;
  // The language tokens ("<|en|>", id): Whisper places them between <|startoftranscript|> and
  // <|translate|>. English-only models keep them in the vocabulary too.
  std::vector<std::pair<std::string, int64_t>> languages;
  std::vector<std::string> special;  // every special added token but <|endoftext|>, by id
};

// `tokenizer` is tokenizer.json's content; `vocabulary` CTranslate2's vocabulary (one token per
// id), empty when the folder has none. Errors name the missing token or an id outside
// [0, vocab), and a <|0.00|> that does not follow <|notimestamps|> (transformers derives the
// first timestamp id that way).
Result<WhisperTokens> whisper_tokens(const nlohmann::json& tokenizer,
                                     const std::vector<std::string>& vocabulary, int64_t vocab);

// Multilingual checkpoints have 51865 or more entries and language tokens, as transformers'
// convert_openai_to_hf decides it.
bool whisper_is_multilingual(const Ct2WhisperShape& shape, const WhisperTokens& tokens);

// The JSON files of the output. `ct2_config` is CTranslate2's config.json (null when absent):
// suppress_ids, suppress_ids_begin and alignment_heads, checked against the model's sizes.
Result<nlohmann::json> whisper_hf_config(const Ct2WhisperShape& shape, const WhisperTokens& tokens,
                                         const nlohmann::json& ct2_config, DType dtype, bool tied);
Result<nlohmann::json> whisper_generation_config(const Ct2WhisperShape& shape,
                                                 const WhisperTokens& tokens,
                                                 const nlohmann::json& ct2_config);
nlohmann::json whisper_preprocessor_config(const Ct2WhisperShape& shape);
nlohmann::json whisper_tokenizer_config(const Ct2WhisperShape& shape, const WhisperTokens& tokens);
nlohmann::json whisper_special_tokens_map(const WhisperTokens& tokens);

// Converts the CTranslate2 folder `model_dir` into `out_dir` (created if needed). `dtype` is
// F32, F16 or BF16; nullopt keeps the stored dtype (int8 weights are dequantized to it).
Status import_ct2_whisper(const std::string& model_dir, const std::string& out_dir,
                          std::optional<DType> dtype);

}  // namespace qs::importers
