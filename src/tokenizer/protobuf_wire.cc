// tokenizer: protobuf wire format reader and writer (see protobuf_wire.h).
#include "tokenizer/protobuf_wire.h"

#include <cstring>

namespace qs::tok {

float ProtoField::as_float() const {
  float f;
  std::memcpy(&f, &fixed32, sizeof f);
  return f;
}

Result<uint64_t> ProtoReader::read_varint() {
  uint64_t value = 0;
  // A varint is at most 10 bytes (64 bits, 7 per byte).
  for (int shift = 0; shift < 70; shift += 7) {
    if (pos_ >= data_.size()) {
      return data_loss("protobuf: varint runs past the end of the message at byte " +
                       std::to_string(pos_));
    }
    const uint8_t byte = static_cast<uint8_t>(data_[pos_++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  return data_loss("protobuf: varint longer than 10 bytes at byte " + std::to_string(pos_));
}

Result<ProtoField> ProtoReader::next() {
  const size_t field_start = pos_;
  QS_ASSIGN_OR_RETURN(uint64_t tag, read_varint());
  ProtoField field;
  field.number = static_cast<uint32_t>(tag >> 3);
  if (field.number == 0 || (tag >> 3) > 0x1fffffff) {
    return data_loss("protobuf: invalid field number at byte " + std::to_string(field_start));
  }
  const uint32_t type = static_cast<uint32_t>(tag & 7);
  switch (type) {
    case 0: {
      field.wire_type = WireType::kVarint;
      QS_ASSIGN_OR_RETURN(field.varint, read_varint());
      return field;
    }
    case 1: {
      field.wire_type = WireType::kFixed64;
      if (data_.size() - pos_ < 8) break;
      std::memcpy(&field.fixed64, data_.data() + pos_, 8);  // little-endian hosts only
      pos_ += 8;
      return field;
    }
    case 2: {
      field.wire_type = WireType::kLengthDelimited;
      QS_ASSIGN_OR_RETURN(uint64_t length, read_varint());
      if (length > data_.size() - pos_) break;
      field.bytes = data_.substr(pos_, length);
      pos_ += length;
      return field;
    }
    case 5: {
      field.wire_type = WireType::kFixed32;
      if (data_.size() - pos_ < 4) break;
      std::memcpy(&field.fixed32, data_.data() + pos_, 4);
      pos_ += 4;
      return field;
    }
    default:
      return data_loss("protobuf: unsupported wire type " + std::to_string(type) + " of field " +
                       std::to_string(field.number) + " at byte " + std::to_string(field_start));
  }
  return data_loss("protobuf: field " + std::to_string(field.number) + " at byte " +
                   std::to_string(field_start) + " runs past the end of the message");
}

void ProtoWriter::put_varint(uint64_t value) {
  while (value >= 0x80) {
    data_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  data_.push_back(static_cast<char>(value));
}

void ProtoWriter::put_tag(uint32_t number, WireType type) {
  put_varint((static_cast<uint64_t>(number) << 3) | static_cast<uint64_t>(type));
}

void ProtoWriter::write_varint(uint32_t number, uint64_t value) {
  put_tag(number, WireType::kVarint);
  put_varint(value);
}

void ProtoWriter::write_int32(uint32_t number, int32_t value) {
  // Sign-extend to 64 bits, as protobuf does for negative int32.
  write_varint(number, static_cast<uint64_t>(static_cast<int64_t>(value)));
}

void ProtoWriter::write_float(uint32_t number, float value) {
  put_tag(number, WireType::kFixed32);
  char bytes[4];
  std::memcpy(bytes, &value, 4);
  data_.append(bytes, 4);
}

void ProtoWriter::write_bytes(uint32_t number, std::string_view value) {
  put_tag(number, WireType::kLengthDelimited);
  put_varint(value.size());
  data_.append(value);
}

}  // namespace qs::tok
