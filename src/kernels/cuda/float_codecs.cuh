// kernels/cuda: the storage floats (bf16, f16, fp8 e4m3 / e5m2) to and from f32 inside
// kernels, bit for bit as core/dtype.h and ops/kv_codec.h convert them on the CPU: a cache row
// the GPU writes holds the CPU's bytes, and both read back the same values. Integer and float
// arithmetic only (no CUDA intrinsics that round differently), so the same functions also
// compile for the host, where the tests check them against core/dtype.h without a GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define QS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define QS_HOST_DEVICE inline
#endif

namespace qs::kernels::cuda {

QS_HOST_DEVICE uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

QS_HOST_DEVICE float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Round to the nearest integer, ties to even (the default rounding mode on both sides).
QS_HOST_DEVICE float round_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

QS_HOST_DEVICE bool is_nan(float x) {
  return (float_to_bits(x) & 0x7fffffffu) > 0x7f800000u;
}

QS_HOST_DEVICE float with_sign_of_bits(float magnitude, uint32_t sign_bit) {
  return bits_to_float(float_to_bits(magnitude) | sign_bit);
}

QS_HOST_DEVICE float quiet_nan() {
  return bits_to_float(0x7fc00000u);
}

QS_HOST_DEVICE float infinity() {
  return bits_to_float(0x7f800000u);
}

QS_HOST_DEVICE float bf16_bits_to_f32(uint16_t h) {
  return bits_to_float(static_cast<uint32_t>(h) << 16);
}

// Round to nearest even; a NaN stays a quiet NaN with its top bits (core's f32_to_bf16).
QS_HOST_DEVICE uint16_t f32_to_bf16_bits(float f) {
  uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

QS_HOST_DEVICE float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in f32
    return with_sign_of_bits(static_cast<float>(man) * 0x1p-24f, sign);
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (man << 13));
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// e4m3fn (ops::KvFp8E4M3::load): normals are the f32 with exponent e + 120 and the mantissa's
// top three bits; subnormals m * 2^-9; S.1111.111 is the one NaN.
QS_HOST_DEVICE float fp8_e4m3_to_f32(uint8_t v) {
  const uint32_t mag = v & 0x7fu, sign = static_cast<uint32_t>(v & 0x80u) << 24;
  if (mag == 0x7fu) return quiet_nan();
  const float a = (mag >> 3) != 0 ? bits_to_float((mag << 20) + (120u << 23))
                                  : static_cast<float>(mag & 7u) * 0x1p-9f;
  return with_sign_of_bits(a, sign);
}

// e5m2: the top byte of an f16 (exponent 31 is infinity or NaN).
QS_HOST_DEVICE float fp8_e5m2_to_f32(uint8_t v) {
  return f16_bits_to_f32(static_cast<uint16_t>(v) << 8);
}

// core's f32_to_fp8_e4m3: round to nearest even, saturating to +-448 (e4m3fn has no infinity;
// from 464, halfway to the next step, every value and infinity clamps); NaN gives 0x7f.
// Below 2^-6 the grid is the subnormals' multiples of 2^-9 (a * 512 is exact); above, the
// f32's mantissa is rounded to three bits in place, a carry stepping into the exponent.
QS_HOST_DEVICE uint8_t f32_to_fp8_e4m3(float f) {
  if (is_nan(f)) return 0x7f;
  const uint32_t bits = float_to_bits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const float a = bits_to_float(bits & 0x7fffffffu);
  if (!(a < 464.0f)) return sign | 0x7e;
  uint32_t code;
  if (a < 0x1p-6f) {
    code = static_cast<uint32_t>(round_even(a * 512.0f));  // 8 is the first normal's code
  } else {
    uint32_t u = float_to_bits(a);
    u += 0x7ffffu + ((u >> 20) & 1u);
    code = (u >> 20) - (120u << 3);  // exponent - 127 + 7, then the three mantissa bits
  }
  return sign | static_cast<uint8_t>(code > 0x7eu ? 0x7eu : code);
}

// ops::KvFp8E5M2::store: NaN gives 0x7e; everything else (infinities too) saturates to
// +-57344 before core's round-to-nearest-even encoding, so exponent 31 holds only NaN.
QS_HOST_DEVICE uint8_t f32_to_fp8_e5m2_sat(float f) {
  if (is_nan(f)) return 0x7e;
  const uint32_t bits = float_to_bits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  float a = bits_to_float(bits & 0x7fffffffu);
  if (a > 57344.0f) a = 57344.0f;
  uint32_t code;
  if (a < 0x1p-14f) {
    code = static_cast<uint32_t>(round_even(a * 65536.0f));  // subnormals: multiples of 2^-16
  } else {
    uint32_t u = float_to_bits(a);
    u += 0xfffffu + ((u >> 21) & 1u);
    code = (u >> 21) - (112u << 2);  // exponent - 127 + 15, then the two mantissa bits
  }
  return sign | static_cast<uint8_t>(code > 0x7bu ? 0x7bu : code);
}

}  // namespace qs::kernels::cuda
