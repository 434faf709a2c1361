// tokenizer: SentencePiece's ModelProto (the `tokenizer.model` file) as a plain struct, read
// from and written to the protobuf wire format. Only the fields that change how text is
// encoded or decoded are kept; parse() skips the others, serialize() writes what is here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs::tok {

// Values are the protobuf enum numbers of ModelProto.SentencePiece.Type.
enum class SpmPieceType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Values are the protobuf enum numbers of TrainerSpec.ModelType.
enum class SpmModelType : int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

struct SpmPiece {
  std::string piece;  // UTF-8; whitespace appears as U+2581 "▁"
  float score = 0.0f;
  SpmPieceType type = SpmPieceType::kNormal;
};

// Defaults are those of sentencepiece_model.proto (proto2 field defaults).
struct SpmModel {
  std::vector<SpmPiece> pieces;  // index = token id

  // TrainerSpec
  SpmModelType model_type = SpmModelType::kUnigram;
  int32_t vocab_size = 8000;
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t pad_id = -1;
  std::string unk_piece = "<unk>";
  std::string bos_piece = "<s>";
  std::string eos_piece = "</s>";
  std::string pad_piece = "<pad>";
  std::string unk_surface = " \xE2\x81\x87 ";  // U+2047, what SPM decodes <unk> to

  // NormalizerSpec
  std::string normalizer_name;
  std::string precompiled_charsmap;  // empty for "identity" (Llama, Mistral, Gemma)
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Parses a serialized ModelProto. `source` names the file in error messages.
Result<SpmModel> parse_spm_model(std::string_view data, const std::string& source);

// Serializes to a ModelProto that sentencepiece (and HF transformers through it) loads.
std::string serialize_spm_model(const SpmModel& model);

const char* spm_piece_type_name(SpmPieceType type);

}  // namespace qs::tok
