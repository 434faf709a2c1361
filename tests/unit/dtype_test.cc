// Unit tests for core dtype conversions, checked against values published by the format
// specifications (IEEE 754 binary16, OCP FP8 e4m3fn/e5m2) rather than against ourselves.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace qs {
namespace {

TEST(DType, NamesRoundTrip) {
  for (const char* name :
       {"F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8", "U8", "I16", "I32", "I64", "BOOL"}) {
    auto t = parse_dtype(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_STREQ(dtype_name(*t), name);
  }
  EXPECT_FALSE(parse_dtype("F4").ok());
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  EXPECT_FLOAT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_FLOAT_EQ(f16_to_f32(0x0400), 6.103515625e-05f);
  // Ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(DType, F16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    const float f = f16_to_f32(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), v) << std::hex << h;
  }
}

TEST(DType, BF16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  EXPECT_EQ(f32_to_bf16(3.14159265f), 0x4049);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(DType, Fp8E4M3) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);                // OCP spec: max normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_EQ(f32_to_fp8_e4m3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(f32_to_fp8_e4m3(-1.0f), 0xb8);
  for (int v = 0; v < 256; ++v) {
    const float f = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(f), v) << v;
  }
}

// The fast rounding equals the encoder's round trip on every value that matters: each
// e4m3 value, the midpoints between neighbours and the floats beside them (ties to even),
// the range past 448 (saturation), and a sparse sweep of all f32 bit patterns.
TEST(DType, RoundToE4M3EqualsTheEncodersRoundTrip) {
  auto check = [](float f) {
    const float want = fp8_e4m3_to_f32(f32_to_fp8_e4m3(f));
    const float got = round_to_e4m3(f);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << f;
      return;
    }
    EXPECT_EQ(got, want) << f;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << f;
  };
  for (int v = 0; v < 0x7e; ++v) {
    const float a = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
    const float b = fp8_e4m3_to_f32(static_cast<uint8_t>(v + 1));
    const float mid = (a + b) / 2;
    for (float f : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f), b}) {
      check(f);
      check(-f);
    }
  }
  for (float f : {448.0f, 450.0f, 464.0f, 1e30f, INFINITY, NAN, 1e-40f}) {
    check(f);
    check(-f);
  }
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 997) {
    const auto u = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &u, 4);
    check(f);
  }
}

TEST(DType, Fp8E5M2) {
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x3c), 1.0f);
  for (int v = 0; v < 256; ++v) {
    const float f = fp8_e5m2_to_f32(static_cast<uint8_t>(v));
    if (std::isnan(f) || std::isinf(f)) continue;
    EXPECT_EQ(f32_to_fp8_e5m2(f), v) << v;
  }
}

}  // namespace
}  // namespace qs
