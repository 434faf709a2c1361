// formats: reference dequantization of the GGUF tensor types (see ggml_quants.h).
#include "formats/ggml_quants.h"

#include <cstring>

#include "core/dtype.h"

namespace qs::formats {

namespace {

constexpr GgmlTypeTraits kTraits[] = {
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, sizeof(BlockQ4_0)},
    {GgmlType::kQ4_1, "Q4_1", 32, sizeof(BlockQ4_1)},
    {GgmlType::kQ8_0, "Q8_0", 32, sizeof(BlockQ8_0)},
    {GgmlType::kQ4_K, "Q4_K", 256, sizeof(BlockQ4_K)},
    {GgmlType::kQ6_K, "Q6_K", 256, sizeof(BlockQ6_K)},
};

// Blocks are read by memcpy: GGUF only aligns tensor starts, and these structs hold u16s.
template <typename Block>
Block load_block(const uint8_t* src, int64_t i) {
  Block b;
  std::memcpy(&b, src + i * sizeof(Block), sizeof(Block));
  return b;
}

void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t type) {
  for (const GgmlTypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == type) return &t;
  }
  return nullptr;
}

const char* ggml_type_name(uint32_t type) {
  // ggml.h's numbering, to name the types we refuse.
  static const char* const kNames[] = {"F32",
                                       "F16",
                                       "Q4_0",
                                       "Q4_1",
                                       "Q4_2 (removed)",
                                       "Q4_3 (removed)",
                                       "Q5_0",
                                       "Q5_1",
                                       "Q8_0",
                                       "Q8_1",
                                       "Q2_K",
                                       "Q3_K",
                                       "Q4_K",
                                       "Q5_K",
                                       "Q6_K",
                                       "Q8_K",
                                       "IQ2_XXS",
                                       "IQ2_XS",
                                       "IQ3_XXS",
                                       "IQ1_S",
                                       "IQ4_NL",
                                       "IQ3_S",
                                       "IQ2_S",
                                       "IQ4_XS",
                                       "I8",
                                       "I16",
                                       "I32",
                                       "I64",
                                       "F64",
                                       "IQ1_M",
                                       "BF16"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  return "unknown type";
}

void dequantize_ggml(GgmlType type, const uint8_t* src, int64_t n, float* dst) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = type == GgmlType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case GgmlType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const auto blk = load_block<BlockQ4_0>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * ((blk.qs[j] & 0xF) - 8);
          dst[j + 16] = d * ((blk.qs[j] >> 4) - 8);
        }
      }
      return;
    case GgmlType::kQ4_1:
      for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const auto blk = load_block<BlockQ4_1>(src, b);
        const float d = f16_to_f32(blk.d), m = f16_to_f32(blk.m);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * (blk.qs[j] & 0xF) + m;
          dst[j + 16] = d * (blk.qs[j] >> 4) + m;
        }
      }
      return;
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const auto blk = load_block<BlockQ8_0>(src, b);
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < 32; ++j) dst[j] = d * blk.qs[j];
      }
      return;
    case GgmlType::kQ4_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        const auto blk = load_block<BlockQ4_K>(src, b);
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        const uint8_t* q = blk.qs;
        for (int s = 0; s < 8; s += 2, q += 32) {
          uint8_t sc0, m0, sc1, m1;
          scale_min_k4(s, blk.scales, &sc0, &m0);
          scale_min_k4(s + 1, blk.scales, &sc1, &m1);
          for (int l = 0; l < 32; ++l) *dst++ = d * sc0 * (q[l] & 0xF) - dmin * m0;
          for (int l = 0; l < 32; ++l) *dst++ = d * sc1 * (q[l] >> 4) - dmin * m1;
        }
      }
      return;
    case GgmlType::kQ6_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        const auto blk = load_block<BlockQ6_K>(src, b);
        const float d = f16_to_f32(blk.d);
        const uint8_t* ql = blk.ql;
        const uint8_t* qh = blk.qh;
        const int8_t* sc = blk.scales;
        for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            dst[l] = d * sc[is] * q1;
            dst[l + 32] = d * sc[is + 2] * q2;
            dst[l + 64] = d * sc[is + 4] * q3;
            dst[l + 96] = d * sc[is + 6] * q4;
          }
        }
      }
      return;
  }
}

}  // namespace qs::formats
