// unit: the protobuf wire reader/writer and the SentencePiece ModelProto on top of it.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/protobuf_wire.h"
#include "tokenizer/sentencepiece_model.h"

namespace qs::tok {
namespace {

TEST(SpmProtobuf, WriterReaderRoundTrip) {
  ProtoWriter w;
  w.write_varint(1, 300);
  w.write_int32(2, -1);
  w.write_float(3, -2.5f);
  w.write_bytes(4, std::string("a\0b", 3));
  w.write_bool(536870911, true);  // the largest field number
  // 300 = 0b1_0010_1100: two varint bytes, low group first.
  EXPECT_EQ(w.data().substr(0, 3), std::string("\x08\xAC\x02"));

  ProtoReader r(w.data());
  auto f = r.next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->number, 1u);
  EXPECT_EQ(f->wire_type, WireType::kVarint);
  EXPECT_EQ(f->varint, 300u);
  f = r.next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->as_int32(), -1);  // negative int32: ten bytes, sign-extended
  f = r.next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->wire_type, WireType::kFixed32);
  EXPECT_EQ(f->as_float(), -2.5f);
  f = r.next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->bytes, std::string_view("a\0b", 3));
  f = r.next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->number, 536870911u);
  EXPECT_TRUE(f->as_bool());
  EXPECT_TRUE(r.done());
}

TEST(SpmProtobuf, ReadsFixed64) {
  const std::string data("\x09\x01\x02\x03\x04\x05\x06\x07\x08", 9);
  ProtoReader r(data);
  auto f = r.next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->wire_type, WireType::kFixed64);
  EXPECT_EQ(f->fixed64, 0x0807060504030201ull);
}

TEST(SpmProtobuf, MalformedInputIsDataLoss) {
  const std::string cases[] = {
      std::string("\x08\x80", 2),  // varint cut short
      std::string("\x0A\x05"
                  "ab",
                  4),                                                       // length past the end
      std::string("\x0D\x01\x02", 3),                                       // fixed32 cut short
      std::string("\x09\x01", 2),                                           // fixed64 cut short
      std::string("\x0B", 1),                                               // group (wire type 3)
      std::string("\x00\x01", 2),                                           // field number 0
      std::string("\x08\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x01", 12),  // 11-byte varint
  };
  for (const std::string& c : cases) {
    ProtoReader r(c);
    auto f = r.next();
    ASSERT_FALSE(f.ok()) << "bytes of length " << c.size();
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  }
}

SpmModel sample_model() {
  SpmModel m;
  m.pieces = {
      {"<unk>", 0.0f, SpmPieceType::kUnknown},           {"<s>", 0.0f, SpmPieceType::kControl},
      {"\xE2\x96\x81the", -1.5f, SpmPieceType::kNormal}, {"<0x41>", 0.0f, SpmPieceType::kByte},
      {"<mask>", 0.0f, SpmPieceType::kUserDefined},      {"x", -7.0f, SpmPieceType::kUnused}};
  m.model_type = SpmModelType::kBpe;
  m.vocab_size = 6;
  m.byte_fallback = true;
  m.unk_id = 0;
  m.bos_id = 1;
  m.eos_id = -1;
  m.pad_id = -1;
  m.normalizer_name = "identity";
  m.add_dummy_prefix = false;
  m.remove_extra_whitespaces = false;
  m.escape_whitespaces = true;
  return m;
}

TEST(SpmModelProto, SerializeParseRoundTrip) {
  const SpmModel m = sample_model();
  auto back = parse_spm_model(serialize_spm_model(m), "mem");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->pieces.size(), m.pieces.size());
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    EXPECT_EQ(back->pieces[i].piece, m.pieces[i].piece);
    EXPECT_EQ(back->pieces[i].score, m.pieces[i].score);
    EXPECT_EQ(back->pieces[i].type, m.pieces[i].type);
  }
  EXPECT_EQ(back->model_type, SpmModelType::kBpe);
  EXPECT_EQ(back->vocab_size, 6);
  EXPECT_TRUE(back->byte_fallback);
  EXPECT_EQ(back->bos_id, 1);
  EXPECT_EQ(back->eos_id, -1);
  EXPECT_EQ(back->normalizer_name, "identity");
  EXPECT_FALSE(back->add_dummy_prefix);
  EXPECT_FALSE(back->remove_extra_whitespaces);
  EXPECT_TRUE(back->escape_whitespaces);
}

TEST(SpmModelProto, AbsentFieldsTakeProtoDefaults) {
  // One piece and nothing else: proto2 defaults apply.
  ProtoWriter piece;
  piece.write_bytes(1, "a");
  ProtoWriter model;
  model.write_bytes(1, piece.data());
  auto m = parse_spm_model(model.data(), "mem");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->pieces[0].type, SpmPieceType::kNormal);
  EXPECT_EQ(m->pieces[0].score, 0.0f);
  EXPECT_EQ(m->model_type, SpmModelType::kUnigram);
  EXPECT_TRUE(m->add_dummy_prefix);
  EXPECT_TRUE(m->remove_extra_whitespaces);
  EXPECT_TRUE(m->escape_whitespaces);
  EXPECT_FALSE(m->byte_fallback);
  EXPECT_EQ(m->unk_id, 0);
  EXPECT_EQ(m->bos_id, 1);
  EXPECT_EQ(m->eos_id, 2);
}

TEST(SpmModelProto, BadModelsAreRejectedWithTheSourceNamed) {
  auto empty = parse_spm_model("", "dir/tokenizer.model");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("dir/tokenizer.model"), std::string::npos);

  ProtoWriter wrong_type;  // pieces as a varint
  wrong_type.write_varint(1, 5);
  EXPECT_EQ(parse_spm_model(wrong_type.data(), "m").status().code(), StatusCode::kDataLoss);

  ProtoWriter bad_enum_piece;
  bad_enum_piece.write_bytes(1, "a");
  bad_enum_piece.write_int32(3, 9);
  ProtoWriter bad_enum;
  bad_enum.write_bytes(1, bad_enum_piece.data());
  auto r = parse_spm_model(bad_enum.data(), "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("piece 0"), std::string::npos) << r.status().message();

  std::string truncated = serialize_spm_model(sample_model());
  truncated.resize(truncated.size() - 3);
  EXPECT_EQ(parse_spm_model(truncated, "m").status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace qs::tok
