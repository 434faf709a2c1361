// What the formats layer says when a checkpoint and its scheme disagree, when a file holds
// out-of-range values, and when pack is asked for something a layout cannot store: errors,
// never crashes, and messages that name the module, the tensor and the expected shape.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/layouts.h"
#include "formats/rtn.h"

namespace qs::formats {
namespace {

const char kPrefix[] = "model.layers.0.mlp.down_proj";

QuantScheme scheme(Layout layout, int bits, int64_t group, bool sym, bool zero_minus_one = false) {
  return {.layout = layout,
          .bits = bits,
          .group_size = group,
          .sym = sym,
          .zero_minus_one = zero_minus_one};
}

QuantizedWeight random_weight(int64_t n, int64_t k, int bits, int64_t group, bool sym) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = normal(rng);
  return rtn_quantize(w.data(), n, k, bits, group, sym);
}

// A valid GPTQ int4 g128 checkpoint module: W [64, 256].
StoredTensors gptq_module() {
  const QuantScheme s = scheme(Layout::kGptq, 4, 128, true, true);
  Result<StoredTensors> stored =
      layout_def(Layout::kGptq).pack(s, random_weight(64, 256, 4, 128, true));
  EXPECT_TRUE(stored.ok()) << stored.status().message();
  return *stored;
}

void expect_error(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.message();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

Status unpack_status(const QuantScheme& s, const StoredTensors& stored, int64_t n, int64_t k) {
  return unpack(kPrefix, s, stored, n, k).status();
}

TEST(FormatsErrors, MissingScales) {
  StoredTensors stored = gptq_module();
  stored.erase("scales");
  expect_error(unpack_status(scheme(Layout::kGptq, 4, 128, true, true), stored, 64, 256),
               StatusCode::kNotFound,
               {"model.layers.0.mlp.down_proj.scales is missing", "scales [2, 64]", "F16"});
}

TEST(FormatsErrors, EightBitConfigOnFourBitQweight) {
  expect_error(unpack_status(scheme(Layout::kGptq, 8, 128, true, true), gptq_module(), 64, 256),
               StatusCode::kInvalidArgument,
               {"down_proj.qweight has shape [32, 64], expected [64, 64]", "bits=8", "k=256",
                "gptq int8 g128 sym zero-1"});
}

TEST(FormatsErrors, GroupThatDoesNotMatchTheScales) {
  expect_error(unpack_status(scheme(Layout::kGptq, 4, 64, true, true), gptq_module(), 64, 256),
               StatusCode::kInvalidArgument,
               {"down_proj.qzeros has shape [2, 8], expected [4, 8]", "groups of 64"});
}

TEST(FormatsErrors, WrongDtype) {
  StoredTensors stored = gptq_module();
  stored["scales"] = Tensor::zeros(DType::kI32, {2, 64});
  expect_error(unpack_status(scheme(Layout::kGptq, 4, 128, true, true), stored, 64, 256),
               StatusCode::kInvalidArgument,
               {"down_proj.scales has dtype I32, expected F16, BF16 or F32"});
}

TEST(FormatsErrors, ShapesALayoutCannotHold) {
  const StoredTensors none;
  expect_error(check_stored(kPrefix, scheme(Layout::kGptq, 4, 128, true), none, 36, 256),
               StatusCode::kInvalidArgument, {kPrefix, "n=36 with bits=4", "qzeros"});
  expect_error(check_stored(kPrefix, scheme(Layout::kGptq, 3, 128, true), none, 64, 80),
               StatusCode::kInvalidArgument, {"k=80 with bits=3", "qweight"});
  expect_error(check_stored(kPrefix, scheme(Layout::kAwq, 4, 64, false), none, 64, 96),
               StatusCode::kInvalidArgument, {"k=96 is not a multiple of group_size=64"});
  expect_error(check_stored(kPrefix, scheme(Layout::kAwq, 8, 128, false), none, 64, 256),
               StatusCode::kUnimplemented, {kPrefix, "only 4-bit", "bits=8"});
  expect_error(check_stored(kPrefix, scheme(Layout::kGptq, 4, 128, true), none, 0, 256),
               StatusCode::kInvalidArgument, {"[0, 256] cannot be quantized"});
  expect_error(check_stored(kPrefix, scheme(Layout::kGptq, 5, 128, true), none, 64, 256),
               StatusCode::kUnimplemented, {"2, 3, 4 or 8 bits"});
}

TEST(FormatsErrors, GidxOutOfRangeAndMissingUnderActOrder) {
  QuantScheme s = scheme(Layout::kGptq, 4, 128, true, true);
  StoredTensors stored = gptq_module();
  Tensor g_idx = Tensor::zeros(DType::kI32, {256});
  g_idx.mutable_ptr<int32_t>()[3] = 2;  // only groups 0 and 1 exist
  stored["g_idx"] = g_idx;
  expect_error(unpack_status(s, stored, 64, 256), StatusCode::kDataLoss,
               {kPrefix, "g_idx[3] = 2 is outside [0, 2)"});
  stored.erase("g_idx");
  s.desc_act = true;
  expect_error(unpack_status(s, stored, 64, 256), StatusCode::kNotFound,
               {"down_proj.g_idx is missing", "desc_act=true"});
}

TEST(FormatsErrors, CompressedTensorsValuesOutOfRange) {
  const QuantScheme s = scheme(Layout::kCtInt, 4, -1, true);
  Tensor weight = Tensor::zeros(DType::kI8, {2, 3});
  weight.mutable_ptr<int8_t>()[1] = 9;  // not a signed 4-bit value
  StoredTensors stored = {{"weight", weight},
                          {"weight_scale", Tensor::from_f32(DType::kBF16, {2, 1}, {1, 1})}};
  expect_error(unpack_status(s, stored, 2, 3), StatusCode::kDataLoss,
               {kPrefix, "weight[0, 1] = 9 is outside the signed 4-bit range [-8, 7]"});
  weight.mutable_ptr<int8_t>()[1] = 0;
  Tensor shape = Tensor::zeros(DType::kI64, {2});
  shape.mutable_ptr<int64_t>()[0] = 3;
  shape.mutable_ptr<int64_t>()[1] = 2;
  stored["weight_shape"] = shape;
  expect_error(unpack_status(s, stored, 2, 3), StatusCode::kDataLoss,
               {"weight_shape says [3, 2]", "[2, 3]"});
}

TEST(FormatsErrors, Fp8NanCodeAndMissingBlockScale) {
  QuantScheme s = scheme(Layout::kFp8, 8, -1, true);
  Tensor weight = Tensor::zeros(DType::kF8E4M3, {2, 4});
  weight.mutable_ptr<uint8_t>()[5] = 0x7f;
  StoredTensors stored = {{"weight", weight},
                          {"weight_scale", Tensor::from_f32(DType::kF32, {2, 1}, {1, 1})}};
  expect_error(unpack_status(s, stored, 2, 4), StatusCode::kDataLoss,
               {kPrefix, "fp8 code [1, 1] is NaN"});
  s.block_n = s.block_k = 128;
  stored.erase("weight_scale");
  weight.mutable_ptr<uint8_t>()[5] = 0;
  expect_error(unpack_status(s, stored, 2, 4), StatusCode::kNotFound,
               {kPrefix, "neither weight_scale_inv nor weight_scale", "[1, 1]"});
}

TEST(FormatsErrors, PackRefusesWhatALayoutCannotStore) {
  QuantizedWeight w = random_weight(64, 256, 4, 128, false);
  w.zeros[5] = 0;
  Result<StoredTensors> r =
      layout_def(Layout::kGptq).pack(scheme(Layout::kGptq, 4, 128, false, true), w);
  expect_error(r.status(), StatusCode::kInvalidArgument, {"cannot store zero 0", "zero-1"});
  // Symmetric compressed-tensors stores no zero point: zeros must be 2^(b-1).
  r = layout_def(Layout::kCtPacked).pack(scheme(Layout::kCtPacked, 4, 128, true), w);
  expect_error(r.status(), StatusCode::kInvalidArgument, {"stores no zero point"});
  // Scales must already be exact in their storage dtype.
  QuantizedWeight sym = random_weight(64, 256, 4, 128, true);
  sym.scales[0] = 0.1f;
  r = layout_def(Layout::kGptq).pack(scheme(Layout::kGptq, 4, 128, true, true), sym);
  expect_error(r.status(), StatusCode::kInvalidArgument, {"scale [0, 0]", "not exact in F16"});
  // The scheme must describe the weight.
  r = layout_def(Layout::kGptq).pack(scheme(Layout::kGptq, 4, 64, true, true), sym);
  expect_error(r.status(), StatusCode::kInvalidArgument, {"groups of 128", "implies 64"});
  r = layout_def(Layout::kAwq)
          .pack(scheme(Layout::kAwq, 3, 128, true), random_weight(64, 256, 3, 128, true));
  expect_error(r.status(), StatusCode::kUnimplemented, {"only 4-bit"});
  QuantizedWeight perm = random_weight(64, 256, 4, 128, false);
  perm.g_idx.assign(256, 0);
  perm.g_idx[0] = 1;
  r = layout_def(Layout::kAwq).pack(scheme(Layout::kAwq, 4, 128, false), perm);
  expect_error(r.status(), StatusCode::kInvalidArgument, {"act-order g_idx"});
  // The tensor strategy holds one scale: rows that differ cannot be stored.
  QuantizedWeight rows = random_weight(8, 32, 8, -1, true);
  r = layout_def(Layout::kCtInt).pack(scheme(Layout::kCtInt, 8, 0, true), rows);
  expect_error(r.status(), StatusCode::kInvalidArgument, {"tensor strategy", "differs from row 0"});
}

TEST(FormatsErrors, ValidateNamesWhatIsWrong) {
  QuantizedWeight w = random_weight(4, 64, 4, 32, false);
  ASSERT_TRUE(w.validate().ok());
  QuantizedWeight bad = w;
  bad.codes[70] = 16;
  expect_error(bad.validate(), StatusCode::kDataLoss, {"code [1, 6] = 16 does not fit 4 bits"});
  bad = w;
  bad.zeros[3] = 17;
  expect_error(bad.validate(), StatusCode::kDataLoss, {"zero [1, 1] = 17 is outside [0, 16]"});
  bad = w;
  bad.zeros[3] = 16;  // GPTQ v1's unmasked zero-1 + 1
  EXPECT_TRUE(bad.validate().ok());
  bad = w;
  bad.scales[2] = std::numeric_limits<float>::infinity();
  expect_error(bad.validate(), StatusCode::kDataLoss, {"scale [1, 0] is inf"});
  bad = w;
  bad.scales.pop_back();
  expect_error(bad.validate(), StatusCode::kDataLoss, {"expected n*groups = 8"});
  bad = w;
  bad.g_idx.assign(64, 0);
  bad.g_idx[9] = -1;
  expect_error(bad.validate(), StatusCode::kDataLoss, {"g_idx[9] = -1"});
}

}  // namespace
}  // namespace qs::formats
