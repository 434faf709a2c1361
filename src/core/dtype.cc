// core: dtype table and the bit-level f16 / fp8 conversions (reference implementations;
// kernels use hardware conversions where the ISA has them).
#include "core/dtype.h"

#include <cmath>

namespace qs {
namespace {

struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
  bool is_float;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4, true},        {DType::kF16, "F16", 2, true},
    {DType::kBF16, "BF16", 2, true},      {DType::kF8E4M3, "F8_E4M3", 1, true},
    {DType::kF8E5M2, "F8_E5M2", 1, true}, {DType::kI8, "I8", 1, false},
    {DType::kU8, "U8", 1, false},         {DType::kI16, "I16", 2, false},
    {DType::kI32, "I32", 4, false},       {DType::kI64, "I64", 8, false},
    {DType::kBool, "BOOL", 1, false},
};

const DTypeInfo& info(DType t) {
  return kDTypes[static_cast<int>(t)];
}

uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float bits_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Generic float -> small float with `exp_bits` exponent and `man_bits` mantissa bits,
// round to nearest even. Returns the magnitude code (no sign); `max_code` saturates.
uint32_t encode_small_float(float a, int exp_bits, int man_bits, uint32_t max_code) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  if (a == 0.0f) return 0;
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp_field = e - 1 + bias;
  uint32_t code;
  if (exp_field <= 0) {
    // Subnormal: value = mant * 2^(1 - bias - man_bits).
    float scaled = std::ldexp(a, bias - 1 + man_bits);
    uint32_t mant = static_cast<uint32_t>(std::nearbyint(scaled));  // ties to even
    code = mant;  // may round up into the first normal, which is the right encoding
  } else {
    float frac = (m * 2.0f - 1.0f) * static_cast<float>(1 << man_bits);
    uint32_t mant = static_cast<uint32_t>(std::nearbyint(frac));
    code = (static_cast<uint32_t>(exp_field) << man_bits) + mant;  // carry bumps exponent
  }
  return code > max_code ? max_code : code;
}

}  // namespace

size_t dtype_size(DType t) {
  return info(t).size;
}
const char* dtype_name(DType t) {
  return info(t).name;
}
bool dtype_is_float(DType t) {
  return info(t).is_float;
}

Result<DType> parse_dtype(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (name == d.name) return d.type;
  }
  return unimplemented("unknown dtype '" + std::string(name) + "'");
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t b = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // 65520 rounds to inf under RNE
  return sign | static_cast<uint16_t>(encode_small_float(a, 5, 10, 0x7bff));
}

float fp8_e4m3_to_f32(uint8_t v) {
  const bool neg = v & 0x80;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  float r;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  if (exp == 0) {
    r = std::ldexp(static_cast<float>(man), -9);  // 2^(1-7) * man/8
  } else {
    r = std::ldexp(1.0f + man / 8.0f, exp - 7);
  }
  return neg ? -r : r;
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  // E4M3 has no infinity (its max is 448, code 0x7e): ±inf saturates like every finite value
  // past 448 does below (the OCP spec's saturating mode). Checked before encoding, because
  // frexp(inf) leaves its exponent unspecified and the float-to-int cast would be UB.
  if (a >= 464.0f) return sign | 0x7e;  // 464 is halfway from 448 to the next step
  return sign | static_cast<uint8_t>(encode_small_float(a, 4, 3, 0x7e));
}

float fp8_e5m2_to_f32(uint8_t v) {
  return f16_to_f32(static_cast<uint16_t>(v) << 8);
}

uint8_t f32_to_fp8_e5m2(float f) {
  if (std::isnan(f)) return 0x7e;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 61440.0f) return sign | 0x7c;  // halfway past 57344 rounds to inf
  return sign | static_cast<uint8_t>(encode_small_float(a, 5, 2, 0x7b));
}

float load_as_f32(DType t, const void* data, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF8E4M3:
      return fp8_e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::kF8E5M2:
      return fp8_e5m2_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::kI8:
      return static_cast<const int8_t*>(data)[i];
    case DType::kU8:
      return static_cast<const uint8_t*>(data)[i];
    case DType::kI16:
      return static_cast<const int16_t*>(data)[i];
    case DType::kI32:
      return static_cast<float>(static_cast<const int32_t*>(data)[i]);
    case DType::kI64:
      return static_cast<float>(static_cast<const int64_t*>(data)[i]);
    case DType::kBool:
      return static_cast<const uint8_t*>(data)[i] ? 1.0f : 0.0f;
  }
  return 0.0f;
}

}  // namespace qs
