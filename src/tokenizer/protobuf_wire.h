// tokenizer: a minimal reader and writer of the protobuf wire format, enough for
// SentencePiece's ModelProto (varints, 32-bit floats, length-delimited fields). The reader
// never reads past its buffer: malformed input comes back as a DataLoss Status.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace qs::tok {

enum class WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field as read off the wire. Only the member matching `wire_type` is meaningful.
struct ProtoField {
  uint32_t number = 0;
  WireType wire_type = WireType::kVarint;
  uint64_t varint = 0;     // kVarint
  uint32_t fixed32 = 0;    // kFixed32 (a float's bits for `float` fields)
  uint64_t fixed64 = 0;    // kFixed64
  std::string_view bytes;  // kLengthDelimited: strings, bytes, nested messages

  float as_float() const;
  int32_t as_int32() const { return static_cast<int32_t>(varint); }  // proto int32 of a varint
  bool as_bool() const { return varint != 0; }
};

// Walks the fields of one message in order. Group wire types (3, 4) are rejected: no
// message we read uses them.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view data) : data_(data) {}

  bool done() const { return pos_ >= data_.size(); }
  // Reads the next field; call only when !done().
  Result<ProtoField> next();

 private:
  Result<uint64_t> read_varint();

  std::string_view data_;
  size_t pos_ = 0;
};

// Appends fields to a byte string. Fields come out in the order they are written, which
// is what protobuf serializers do for ascending field numbers.
class ProtoWriter {
 public:
  void write_varint(uint32_t number, uint64_t value);
  // int32 fields encode negative values as 10-byte two's complement varints.
  void write_int32(uint32_t number, int32_t value);
  void write_bool(uint32_t number, bool value) { write_varint(number, value ? 1 : 0); }
  void write_float(uint32_t number, float value);
  void write_bytes(uint32_t number, std::string_view value);

  const std::string& data() const { return data_; }

 private:
  void put_varint(uint64_t value);
  void put_tag(uint32_t number, WireType type);

  std::string data_;
};

}  // namespace qs::tok
