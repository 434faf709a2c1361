// tests: kernels/cuda/float_codecs.cuh, the conversions the CUDA kernels use for bf16, f16 and
// fp8 caches and activations, compiled for the host: every 8- and 16-bit code decodes to
// core/dtype.h's value, and encoding matches core/dtype.h and ops/kv_codec.h bit for bit on a
// sweep of f32 bit patterns, on every tie between neighbouring codes and on the edges
// (saturation, infinities, NaN, subnormals, signed zero). Runs without a GPU, so a GPU run is
// left to check only that the device compiles the same arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/float_codecs.cuh"
#include "ops/kv_codec.h"

namespace qs::kernels::cuda {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The same value (a NaN matches any NaN), with the same sign.
void expect_same_float(float got, float want, const char* what, int code) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << " code " << code;
  } else {
    EXPECT_EQ(to_bits(got), to_bits(want))
        << what << " code " << code << ": " << got << " vs " << want;
  }
}

// f32 inputs for the encoders: a sweep of bit patterns across the whole range (both signs),
// the special values, and for each 8-bit format every code's value, the midpoints between
// neighbouring codes (the ties round-to-even decides) and their f32 neighbours.
std::vector<float> encoder_inputs() {
  std::vector<float> xs;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997)
    xs.push_back(from_bits(static_cast<uint32_t>(u)));
  for (float v : {0.0f,    -0.0f,    INFINITY, -INFINITY, NAN,      -NAN,      448.0f,   464.0f,
                  463.99f, 480.0f,   57344.0f, 61440.0f,  65504.0f, 1e30f,     -1e30f,   0x1p-6f,
                  0x1p-9f, 0x1p-10f, 0x1p-14f, 0x1p-16f,  0x1p-17f, 0x1p-149f, 0x1p-126f}) {
    xs.push_back(v);
  }
  for (float (*decode)(uint8_t) : {fp8_e4m3_to_f32, fp8_e5m2_to_f32}) {
    for (int code = 0; code < 127; ++code) {
      const float a = decode(static_cast<uint8_t>(code)),
                  b = decode(static_cast<uint8_t>(code + 1));
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      const float mid = (a + b) / 2;  // exact: a and b have few mantissa bits
      for (float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        xs.push_back(v);
        xs.push_back(-v);
      }
    }
  }
  return xs;
}

TEST(DeviceFloatCodecs, DecodersMatchCoreOnEveryCode) {
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<uint8_t>(code);
    expect_same_float(fp8_e4m3_to_f32(c), qs::fp8_e4m3_to_f32(c), "e4m3", code);
    expect_same_float(fp8_e5m2_to_f32(c), qs::fp8_e5m2_to_f32(c), "e5m2", code);
  }
  for (int code = 0; code < 65536; ++code) {
    const auto h = static_cast<uint16_t>(code);
    expect_same_float(bf16_bits_to_f32(h), qs::bf16_to_f32(h), "bf16", code);
    expect_same_float(f16_bits_to_f32(h), qs::f16_to_f32(h), "f16", code);
  }
}

TEST(DeviceFloatCodecs, EncodersMatchCoreAndTheCacheCodecs) {
  const std::vector<float> xs = encoder_inputs();
  ASSERT_GT(xs.size(), 4000000u);
  int64_t mismatches = 0;
  for (float x : xs) {
    const bool bf16 = f32_to_bf16_bits(x) == qs::f32_to_bf16(x);
    const bool e4m3 = f32_to_fp8_e4m3(x) == ops::KvFp8E4M3::store(x);
    const bool e5m2 = f32_to_fp8_e5m2_sat(x) == ops::KvFp8E5M2::store(x);
    if (!(bf16 && e4m3 && e5m2) && ++mismatches <= 10) {
      ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << to_bits(x) << std::dec
                    << "): bf16 " << bf16 << ", e4m3 " << e4m3 << ", e5m2 " << e5m2;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(DeviceFloatCodecs, Fp8EncodersSaturate) {
  EXPECT_EQ(f32_to_fp8_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e9f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(NAN), 0x7f);
  EXPECT_EQ(f32_to_fp8_e5m2_sat(INFINITY), 0x7b);
  EXPECT_EQ(f32_to_fp8_e5m2_sat(-INFINITY), 0xfb);
  EXPECT_EQ(f32_to_fp8_e5m2_sat(NAN), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
}

}  // namespace
}  // namespace qs::kernels::cuda
