// ops: the element codecs of the paged KV cache (f32, bf16, fp8 e4m3 / e5m2), as small
// structs the attention kernels are templated on. Decoding is branch-free integer and float
// arithmetic on one element, so that inside the kernels' fixed-width loops the compiler keeps
// the converted values in vector registers (no lookup table, no stored f32 copy of a row).
// Encoding is the scalar, round-to-nearest-even path of core/dtype.h, with vLLM's scale
// convention: stored = cvt(x / scale), read back as stored * scale (the scale is applied by
// the caller, once per score or output row).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace qs::ops {

inline float kv_bits_f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float kv_with_sign(float magnitude, uint32_t sign_bit) {
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  return kv_bits_f32(bits | sign_bit);
}

inline constexpr float kKvNaN = __builtin_nanf("");

struct KvF32 {
  using T = float;
  static constexpr DType kType = DType::kF32;
  static float load(T v) { return v; }
  static T store(float x) { return x; }
};

struct KvBF16 {
  using T = uint16_t;
  static constexpr DType kType = DType::kBF16;
  static float load(T v) { return kv_bits_f32(static_cast<uint32_t>(v) << 16); }
  static T store(float x) { return f32_to_bf16(x); }
};

// OCP e4m3fn: value = 2^(e-7) (1 + m/8) for e >= 1, m 2^-9 for e == 0. The normal case is the
// f32 with exponent e + 120 and the mantissa's top three bits; the subnormal case is the
// integer m scaled by 2^-9 (exact), so no f32 subnormal is ever formed (they are slow to
// multiply on some cores). store() saturates finite values to +-448, so the one NaN code
// (S.1111.111) comes only from a NaN key or value, and reads back as NaN, as in an f32 cache.
struct KvFp8E4M3 {
  using T = uint8_t;
  static constexpr DType kType = DType::kF8E4M3;
  static constexpr float kMax = 448.0f;  // e4m3fn's largest finite value
  static float load(T v) {
    const uint32_t mag = v & 0x7fu, sign = static_cast<uint32_t>(v & 0x80u) << 24;
    const float normal = kv_bits_f32((mag << 20) + (120u << 23));
    const float sub = static_cast<float>(static_cast<int32_t>(mag & 7u)) * 0x1p-9f;
    const float a = mag == 0x7fu ? kKvNaN : ((mag >> 3) != 0 ? normal : sub);
    return kv_with_sign(a, sign);
  }
  // Saturating, as vLLM's cache writes (__NV_SATFINITE): past +-448 stays +-448.
  static T store(float x) { return f32_to_fp8_e4m3(x); }
};

// OCP e5m2: the top byte of an f16. value = 2^(e-15) (1 + m/4) for e >= 1, m 2^-16 for
// e == 0; exponent 31 is infinity or NaN, as in f16. store() saturates finite values (and
// infinities) to +-57344, so only a NaN key or value is stored with exponent 31.
struct KvFp8E5M2 {
  using T = uint8_t;
  static constexpr DType kType = DType::kF8E5M2;
  static constexpr float kMax = 57344.0f;
  static float load(T v) {
    const uint32_t mag = v & 0x7fu, sign = static_cast<uint32_t>(v & 0x80u) << 24;
    const float normal = kv_bits_f32((mag << 21) + (112u << 23));
    const float sub = static_cast<float>(static_cast<int32_t>(mag & 3u)) * 0x1p-16f;
    const float a = mag > 0x7cu    ? kKvNaN
                    : mag == 0x7cu ? __builtin_inff()
                                   : ((mag >> 2) != 0 ? normal : sub);
    return kv_with_sign(a, sign);
  }
  static T store(float x) {
    if (x != x) return 0x7e;
    return f32_to_fp8_e5m2(x > kMax ? kMax : (x < -kMax ? -kMax : x));
  }
};

}  // namespace qs::ops
