// formats: the tensor types of ggml/GGUF files that quantserve imports, each a block struct
// with its bit layout beside the fields (as ggml-common.h documents them) and a reference
// dequantizer. Block quants cover `block_size` consecutive values of one row; a row is a
// whole number of blocks. Nothing here allocates: callers pass the output buffer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qs::formats {

// ggml_type numbers as GGUF stores them (ggml.h). Only the types below are importable.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ6_K = 14,
  kBF16 = 30,
};

// Q4_0: 32 values = d * (q - 8), q in [0, 15]. Value j < 16 is the low nibble of qs[j],
// value j + 16 its high nibble.
struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: 32 values = d * q + m, q in [0, 15]; nibbles laid out as Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 minimum
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q8_0: 32 values = d * q, q int8.
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_K: a super-block of 256 values in 8 sub-blocks of 32. Sub-block s has a 6-bit scale
// sc_s and a 6-bit min m_s packed into `scales` (sub-blocks 0-3: low 6 bits of scales[s]
// and scales[s + 4]; 4-7: low nibble / high nibble of scales[s + 4], with their top 2 bits
// in the top 2 bits of scales[s - 4] / scales[s]). Value = d * sc_s * q - dmin * m_s.
// Codes: 64 values per 32 bytes of qs, low nibbles for the first 32, high for the next 32.
struct BlockQ4_K {
  uint16_t d;     // f16 super-block scale of the scales
  uint16_t dmin;  // f16 super-block scale of the mins
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q6_K: 256 values in 16 sub-blocks of 16, value = d * scales[s] * (q - 32), q 6-bit: low 4
// bits in ql, high 2 bits in qh. Per half of 128 values (ql += 64, qh += 32): for l < 32,
// values l, l+32, l+64, l+96 take ql[l] low, ql[l+32] low, ql[l] high, ql[l+32] high nibbles
// and bits 0-1, 2-3, 4-5, 6-7 of qh[l].
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;  // f16
};
static_assert(sizeof(BlockQ6_K) == 210);

struct GgmlTypeTraits {
  GgmlType type;
  const char* name;    // "Q4_K", as ggml spells it
  int64_t block_size;  // values per block (1 for plain floats)
  size_t block_bytes;  // bytes per block
};

// The traits of an importable type, or nullptr (unknown or not importable).
const GgmlTypeTraits* ggml_type_traits(uint32_t type);
// ggml's name of any ggml_type number ("Q5_K", "IQ2_XS", ...), or "type N" when unknown;
// for error messages about types we do not import.
const char* ggml_type_name(uint32_t type);

// Dequantizes `n` values (a multiple of the type's block size) from `src` into `dst`.
void dequantize_ggml(GgmlType type, const uint8_t* src, int64_t n, float* dst);

}  // namespace qs::formats
