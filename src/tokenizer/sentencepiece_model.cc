// tokenizer: ModelProto <-> SpmModel (see sentencepiece_model.h). Field numbers are those of
// sentencepiece_model.proto.
#include "tokenizer/sentencepiece_model.h"

#include "tokenizer/protobuf_wire.h"

namespace qs::tok {
namespace {

// ModelProto
constexpr uint32_t kFieldPieces = 1;
constexpr uint32_t kFieldTrainerSpec = 2;
constexpr uint32_t kFieldNormalizerSpec = 3;
// ModelProto.SentencePiece
constexpr uint32_t kFieldPiece = 1;
constexpr uint32_t kFieldScore = 2;
constexpr uint32_t kFieldType = 3;
// TrainerSpec
constexpr uint32_t kFieldModelType = 3;
constexpr uint32_t kFieldVocabSize = 4;
constexpr uint32_t kFieldTreatWhitespaceAsSuffix = 24;
constexpr uint32_t kFieldByteFallback = 35;
constexpr uint32_t kFieldUnkId = 40;
constexpr uint32_t kFieldBosId = 41;
constexpr uint32_t kFieldEosId = 42;
constexpr uint32_t kFieldPadId = 43;
constexpr uint32_t kFieldUnkSurface = 44;
constexpr uint32_t kFieldUnkPiece = 45;
constexpr uint32_t kFieldBosPiece = 46;
constexpr uint32_t kFieldEosPiece = 47;
constexpr uint32_t kFieldPadPiece = 48;
// NormalizerSpec
constexpr uint32_t kFieldName = 1;
constexpr uint32_t kFieldPrecompiledCharsmap = 2;
constexpr uint32_t kFieldAddDummyPrefix = 3;
constexpr uint32_t kFieldRemoveExtraWhitespaces = 4;
constexpr uint32_t kFieldEscapeWhitespaces = 5;

Status expect_type(const ProtoField& f, WireType type, const char* message, const char* field) {
  if (f.wire_type == type) return ok_status();
  return data_loss(std::string(message) + "." + field + " (field " + std::to_string(f.number) +
                   ") has wire type " + std::to_string(static_cast<int>(f.wire_type)) +
                   ", expected " + std::to_string(static_cast<int>(type)));
}

Result<SpmPiece> parse_piece(std::string_view data) {
  SpmPiece piece;
  ProtoReader reader(data);
  while (!reader.done()) {
    QS_ASSIGN_OR_RETURN(ProtoField f, reader.next());
    switch (f.number) {
      case kFieldPiece:
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kLengthDelimited, "SentencePiece", "piece"));
        piece.piece = std::string(f.bytes);
        break;
      case kFieldScore:
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kFixed32, "SentencePiece", "score"));
        piece.score = f.as_float();
        break;
      case kFieldType: {
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kVarint, "SentencePiece", "type"));
        const int32_t t = f.as_int32();
        if (t < 1 || t > 6)
          return data_loss("SentencePiece.type " + std::to_string(t) + " unknown");
        piece.type = static_cast<SpmPieceType>(t);
        break;
      }
      default:
        break;  // extensions and future fields do not change encoding
    }
  }
  return piece;
}

Status parse_trainer_spec(std::string_view data, SpmModel& m) {
  ProtoReader reader(data);
  while (!reader.done()) {
    QS_ASSIGN_OR_RETURN(ProtoField f, reader.next());
    switch (f.number) {
      case kFieldModelType: {
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kVarint, "TrainerSpec", "model_type"));
        const int32_t t = f.as_int32();
        if (t < 1 || t > 4) return data_loss("TrainerSpec.model_type " + std::to_string(t));
        m.model_type = static_cast<SpmModelType>(t);
        break;
      }
      case kFieldVocabSize:
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kVarint, "TrainerSpec", "vocab_size"));
        m.vocab_size = f.as_int32();
        break;
      case kFieldTreatWhitespaceAsSuffix:
        QS_RETURN_IF_ERROR(
            expect_type(f, WireType::kVarint, "TrainerSpec", "treat_whitespace_as_suffix"));
        m.treat_whitespace_as_suffix = f.as_bool();
        break;
      case kFieldByteFallback:
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kVarint, "TrainerSpec", "byte_fallback"));
        m.byte_fallback = f.as_bool();
        break;
      case kFieldUnkId:
      case kFieldBosId:
      case kFieldEosId:
      case kFieldPadId: {
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kVarint, "TrainerSpec", "*_id"));
        int32_t& id = f.number == kFieldUnkId   ? m.unk_id
                      : f.number == kFieldBosId ? m.bos_id
                      : f.number == kFieldEosId ? m.eos_id
                                                : m.pad_id;
        id = f.as_int32();
        break;
      }
      case kFieldUnkSurface:
      case kFieldUnkPiece:
      case kFieldBosPiece:
      case kFieldEosPiece:
      case kFieldPadPiece: {
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kLengthDelimited, "TrainerSpec", "*_piece"));
        std::string& s = f.number == kFieldUnkSurface ? m.unk_surface
                         : f.number == kFieldUnkPiece ? m.unk_piece
                         : f.number == kFieldBosPiece ? m.bos_piece
                         : f.number == kFieldEosPiece ? m.eos_piece
                                                      : m.pad_piece;
        s = std::string(f.bytes);
        break;
      }
      default:
        break;  // training-only options
    }
  }
  return ok_status();
}

Status parse_normalizer_spec(std::string_view data, SpmModel& m) {
  ProtoReader reader(data);
  while (!reader.done()) {
    QS_ASSIGN_OR_RETURN(ProtoField f, reader.next());
    switch (f.number) {
      case kFieldName:
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kLengthDelimited, "NormalizerSpec", "name"));
        m.normalizer_name = std::string(f.bytes);
        break;
      case kFieldPrecompiledCharsmap:
        QS_RETURN_IF_ERROR(
            expect_type(f, WireType::kLengthDelimited, "NormalizerSpec", "precompiled_charsmap"));
        m.precompiled_charsmap = std::string(f.bytes);
        break;
      case kFieldAddDummyPrefix:
        QS_RETURN_IF_ERROR(expect_type(f, WireType::kVarint, "NormalizerSpec", "add_dummy_prefix"));
        m.add_dummy_prefix = f.as_bool();
        break;
      case kFieldRemoveExtraWhitespaces:
        QS_RETURN_IF_ERROR(
            expect_type(f, WireType::kVarint, "NormalizerSpec", "remove_extra_whitespaces"));
        m.remove_extra_whitespaces = f.as_bool();
        break;
      case kFieldEscapeWhitespaces:
        QS_RETURN_IF_ERROR(
            expect_type(f, WireType::kVarint, "NormalizerSpec", "escape_whitespaces"));
        m.escape_whitespaces = f.as_bool();
        break;
      default:
        break;
    }
  }
  return ok_status();
}

}  // namespace

const char* spm_piece_type_name(SpmPieceType type) {
  switch (type) {
    case SpmPieceType::kNormal:
      return "NORMAL";
    case SpmPieceType::kUnknown:
      return "UNKNOWN";
    case SpmPieceType::kControl:
      return "CONTROL";
    case SpmPieceType::kUserDefined:
      return "USER_DEFINED";
    case SpmPieceType::kUnused:
      return "UNUSED";
    case SpmPieceType::kByte:
      return "BYTE";
  }
  return "?";
}

Result<SpmModel> parse_spm_model(std::string_view data, const std::string& source) {
  SpmModel model;
  ProtoReader reader(data);
  while (!reader.done()) {
    auto field = reader.next();
    if (!field.ok()) return field.status().with_context(source);
    const ProtoField& f = *field;
    Status s;
    switch (f.number) {
      case kFieldPieces: {
        s = expect_type(f, WireType::kLengthDelimited, "ModelProto", "pieces");
        if (!s.ok()) break;
        auto piece = parse_piece(f.bytes);
        if (!piece.ok()) {
          s = piece.status().with_context("piece " + std::to_string(model.pieces.size()));
          break;
        }
        model.pieces.push_back(std::move(piece).value());
        break;
      }
      case kFieldTrainerSpec:
        s = expect_type(f, WireType::kLengthDelimited, "ModelProto", "trainer_spec");
        if (s.ok()) s = parse_trainer_spec(f.bytes, model);
        break;
      case kFieldNormalizerSpec:
        s = expect_type(f, WireType::kLengthDelimited, "ModelProto", "normalizer_spec");
        if (s.ok()) s = parse_normalizer_spec(f.bytes, model);
        break;
      default:
        break;  // self_test_data, denormalizer_spec
    }
    if (!s.ok()) return s.with_context(source);
  }
  if (model.pieces.empty()) {
    return data_loss(source + ": not a SentencePiece model (no pieces)");
  }
  return model;
}

std::string serialize_spm_model(const SpmModel& m) {
  ProtoWriter out;
  for (const SpmPiece& p : m.pieces) {
    ProtoWriter piece;
    piece.write_bytes(kFieldPiece, p.piece);
    piece.write_float(kFieldScore, p.score);
    piece.write_int32(kFieldType, static_cast<int32_t>(p.type));
    out.write_bytes(kFieldPieces, piece.data());
  }
  ProtoWriter trainer;
  trainer.write_int32(kFieldModelType, static_cast<int32_t>(m.model_type));
  trainer.write_int32(kFieldVocabSize, m.vocab_size);
  trainer.write_bool(kFieldTreatWhitespaceAsSuffix, m.treat_whitespace_as_suffix);
  trainer.write_bool(kFieldByteFallback, m.byte_fallback);
  trainer.write_int32(kFieldUnkId, m.unk_id);
  trainer.write_int32(kFieldBosId, m.bos_id);
  trainer.write_int32(kFieldEosId, m.eos_id);
  trainer.write_int32(kFieldPadId, m.pad_id);
  trainer.write_bytes(kFieldUnkSurface, m.unk_surface);
  trainer.write_bytes(kFieldUnkPiece, m.unk_piece);
  trainer.write_bytes(kFieldBosPiece, m.bos_piece);
  trainer.write_bytes(kFieldEosPiece, m.eos_piece);
  trainer.write_bytes(kFieldPadPiece, m.pad_piece);
  out.write_bytes(kFieldTrainerSpec, trainer.data());
  ProtoWriter normalizer;
  normalizer.write_bytes(kFieldName, m.normalizer_name);
  normalizer.write_bytes(kFieldPrecompiledCharsmap, m.precompiled_charsmap);
  normalizer.write_bool(kFieldAddDummyPrefix, m.add_dummy_prefix);
  normalizer.write_bool(kFieldRemoveExtraWhitespaces, m.remove_extra_whitespaces);
  normalizer.write_bool(kFieldEscapeWhitespaces, m.escape_whitespaces);
  out.write_bytes(kFieldNormalizerSpec, normalizer.data());
  return out.data();
}

}  // namespace qs::tok
