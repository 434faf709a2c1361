// core: element types of stored tensors and their scalar conversions to and from f32.
// Names follow safetensors ("F32", "BF16", "F8_E4M3", ...). Compute is always f32; the
// 16- and 8-bit float types are storage formats converted on the fly.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/status.h"

namespace qs {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP e4m3fn: no infinities, max 448, one NaN pattern (S.1111.111)
  kF8E5M2,  // OCP e5m2: IEEE-like, max 57344
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
};

size_t dtype_size(DType t);
// The safetensors spelling: "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8", ...
const char* dtype_name(DType t);
Result<DType> parse_dtype(std::string_view name);
bool dtype_is_float(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf
float fp8_e4m3_to_f32(uint8_t v);
uint8_t f32_to_fp8_e4m3(float f);  // saturates to +-448 (no inf in e4m3fn)
// fp8_e4m3_to_f32(f32_to_fp8_e4m3(f)) without the code in between: per-token fp8 activation
// rounding runs it on every input of every linear, where the table-free encoder cost as
// much as the matrix product at prefill. Normals keep 3 mantissa bits (round to nearest
// even on the f32 bits); below 2^-6 the grid is the subnormals' multiples of 2^-9.
inline float round_to_e4m3(float f) {
  const float a = std::fabs(f);
  if (!(a < 448.0f)) return std::isnan(f) ? f : std::copysign(448.0f, f);
  float r;
  if (a < 0.015625f) {
    r = std::nearbyint(a * 512.0f) * (1.0f / 512.0f);
  } else {
    uint32_t u;
    std::memcpy(&u, &a, 4);
    u = (u + 0x7ffffu + ((u >> 20) & 1u)) & ~0xfffffu;
    std::memcpy(&r, &u, 4);
  }
  return std::copysign(r, f);
}
float fp8_e5m2_to_f32(uint8_t v);
uint8_t f32_to_fp8_e5m2(float f);

// Reads element i of a float-typed buffer (F32/F16/BF16/F8*) as f32; slow path for tests,
// importers and reference code.
float load_as_f32(DType t, const void* data, int64_t i);

}  // namespace qs
