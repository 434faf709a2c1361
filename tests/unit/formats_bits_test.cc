// Bit-level pins of every stored layout against its spec (vllm-serving.md §2, autoround.md §3,
// compressed-tensors' pack_to_int32 docstring), independent of our own pack: stored words are
// written by hand, unpacked, and the pack of the result must give the same words back.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/layouts.h"

namespace qs::formats {
namespace {

Tensor words(std::vector<int64_t> shape, const std::vector<uint32_t>& v) {
  Tensor t = Tensor::zeros(DType::kI32, std::move(shape));
  EXPECT_EQ(t.numel(), static_cast<int64_t>(v.size()));
  std::memcpy(t.writable_data, v.data(), v.size() * 4);
  return t;
}

std::vector<uint32_t> words_of(const Tensor& t) {
  std::vector<uint32_t> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

Tensor ones(DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Tensor::from_f32(dtype, std::move(shape), std::vector<float>(static_cast<size_t>(n), 1));
}

QuantScheme scheme(Layout layout, int bits, int64_t group, bool sym, bool zero_minus_one = false) {
  return {.layout = layout,
          .bits = bits,
          .group_size = group,
          .sym = sym,
          .zero_minus_one = zero_minus_one};
}

QuantizedWeight unpack_ok(const QuantScheme& s, const StoredTensors& stored, int64_t n, int64_t k) {
  Result<QuantizedWeight> w = unpack("m", s, stored, n, k);
  EXPECT_TRUE(w.ok()) << w.status().message();
  return w.ok() ? *w : QuantizedWeight{};
}

StoredTensors pack_ok(const QuantScheme& s, const QuantizedWeight& w) {
  Result<StoredTensors> stored = layout_def(s.layout).pack(s, w);
  EXPECT_TRUE(stored.ok()) << stored.status().message();
  return stored.ok() ? *stored : StoredTensors{};
}

// GPTQ 4-bit: qweight column j holds W[j, 0..7] in nibbles 0..7, LSB first; v1 sym qzeros
// are 0x77777777 (zero 8 stored as 7).
TEST(FormatsBits, GptqInt4WordsByHand) {
  const QuantScheme s = scheme(Layout::kGptq, 4, -1, true, true);
  std::vector<uint32_t> qweight(8);
  for (int j = 0; j < 8; ++j) {
    for (int c = 0; c < 8; ++c) qweight[j] |= static_cast<uint32_t>((j + c) % 16) << (4 * c);
  }
  EXPECT_EQ(qweight[0], 0x76543210u);
  EXPECT_EQ(qweight[7], 0xedcba987u);
  StoredTensors stored = {{"qweight", words({1, 8}, qweight)},
                          {"qzeros", words({1, 1}, {0x77777777u})},
                          {"scales", ones(DType::kF16, {1, 8})}};
  const QuantizedWeight w = unpack_ok(s, stored, 8, 8);
  for (int j = 0; j < 8; ++j) {
    for (int c = 0; c < 8; ++c) EXPECT_EQ(w.codes[j * 8 + c], (j + c) % 16);
    EXPECT_EQ(w.zeros[j], 8);
  }
  const StoredTensors back = pack_ok(s, w);
  EXPECT_EQ(words_of(back.at("qweight")), qweight);
  EXPECT_EQ(words_of(back.at("qzeros")), std::vector<uint32_t>{0x77777777u});
  EXPECT_EQ(back.count("g_idx"), 0u);
}

// True-zero formats (gptq_v2, auto_round) store sym 4-bit zeros as 0x88888888.
TEST(FormatsBits, GptqTrueZerosAreNotShifted) {
  const QuantScheme s = scheme(Layout::kGptq, 4, -1, true, false);
  StoredTensors stored = {{"qweight", words({1, 8}, std::vector<uint32_t>(8, 0))},
                          {"qzeros", words({1, 1}, {0x88888888u})},
                          {"scales", ones(DType::kF16, {1, 8})}};
  const QuantizedWeight w = unpack_ok(s, stored, 8, 8);
  for (int32_t z : w.zeros) EXPECT_EQ(z, 8);
}

// GPTQ v1 asym zero 0 was stored as -1 masked to 15; readers add 1 unmasked and get 16.
TEST(FormatsBits, GptqV1StoredFifteenDecodesAsSixteen) {
  const QuantScheme s = scheme(Layout::kGptq, 4, -1, false, true);
  StoredTensors stored = {{"qweight", words({1, 8}, std::vector<uint32_t>(8, 0))},
                          {"qzeros", words({1, 1}, {0xffffffffu})},
                          {"scales", ones(DType::kF16, {1, 8})}};
  const QuantizedWeight w = unpack_ok(s, stored, 8, 8);
  for (int32_t z : w.zeros) EXPECT_EQ(z, 16);
  std::vector<float> deq(64);
  dequantize(w, deq.data());
  EXPECT_EQ(deq[0], -16.0f);  // code 0 - zero 16
}

// GPTQ 3-bit (autoround.md §3.2): 32 values in 3 words; v10 straddles words 0/1 (low 2 bits
// at bits 30-31 of word 0, bit 2 at bit 0 of word 1), v21 straddles words 1/2.
TEST(FormatsBits, Gptq3BitCrossWord) {
  const QuantScheme s = scheme(Layout::kGptq, 3, -1, true, true);
  uint32_t w0 = 0, w1 = 0, w2 = 0;
  auto v = [](int i) { return static_cast<uint32_t>(i % 8); };
  for (int i = 0; i < 10; ++i) w0 |= v(i) << (3 * i);
  w0 |= (v(10) & 3u) << 30;
  w1 |= v(10) >> 2;
  for (int i = 11; i < 21; ++i) w1 |= v(i) << (3 * (i - 11) + 1);
  w1 |= (v(21) & 1u) << 31;
  w2 |= v(21) >> 1;
  for (int i = 22; i < 32; ++i) w2 |= v(i) << (3 * (i - 22) + 2);
  EXPECT_EQ(w0, 0x88fac688u);
  EXPECT_EQ(w1, 0xc688fac6u);
  EXPECT_EQ(w2, 0xfac688fau);
  // W [32, 32]: qweight [3, 32], every column the same stream; qzeros [1, 3] all zero 4 (v1: 3).
  std::vector<uint32_t> qweight(96);
  for (int j = 0; j < 32; ++j) {
    qweight[j] = w0;
    qweight[32 + j] = w1;
    qweight[64 + j] = w2;
  }
  const std::vector<uint32_t> qzeros = {0xdb6db6dbu, 0xb6db6db6u, 0x6db6db6du};
  StoredTensors stored = {{"qweight", words({3, 32}, qweight)},
                          {"qzeros", words({1, 3}, qzeros)},
                          {"scales", ones(DType::kF16, {1, 32})}};
  const QuantizedWeight w = unpack_ok(s, stored, 32, 32);
  for (int j = 0; j < 32; ++j) {
    for (int c = 0; c < 32; ++c) ASSERT_EQ(w.codes[j * 32 + c], c % 8) << j << "," << c;
    EXPECT_EQ(w.zeros[j], 4);
  }
  const StoredTensors back = pack_ok(s, w);
  EXPECT_EQ(words_of(back.at("qweight")), qweight);
  EXPECT_EQ(words_of(back.at("qzeros")), qzeros);
}

// GPTQ 8-bit: four values per word, byte c = W[j, c]; scales [G, n] are transposed to [n, G].
TEST(FormatsBits, Gptq8BitAndScaleTranspose) {
  const QuantScheme s = scheme(Layout::kGptq, 8, 2, false, false);
  // W [4, 4] in 2 groups of 2; qweight [1, 4]; qzeros [2, 1]; scales [2, 4].
  const std::vector<uint32_t> qweight = {0x04030201u, 0x08070605u, 0x0c0b0a09u, 0xff0f0e0du};
  StoredTensors stored = {
      {"qweight", words({1, 4}, qweight)},
      {"qzeros", words({2, 1}, {0x03020100u, 0x80808080u})},
      {"scales", Tensor::from_f32(DType::kF16, {2, 4}, {1, 2, 3, 4, -5, 6, 7, 8})},
  };
  const QuantizedWeight w = unpack_ok(s, stored, 4, 4);
  EXPECT_EQ(w.codes[3 * 4 + 3], 0xff);
  EXPECT_EQ(w.codes[1 * 4 + 0], 5);
  EXPECT_EQ(w.zeros, (std::vector<int32_t>{0, 128, 1, 128, 2, 128, 3, 128}));
  EXPECT_EQ(w.scales, (std::vector<float>{1, -5, 2, 6, 3, 7, 4, 8}));
  std::vector<float> deq(16);
  dequantize(w, deq.data());
  EXPECT_EQ(deq[0 * 4 + 2], -5.0f * (3 - 128));  // row 0, column 2 is in group 1
  EXPECT_EQ(words_of(pack_ok(s, w).at("qweight")), qweight);
}

// A stored g_idx (even a permuted one) decides each column's group.
TEST(FormatsBits, GptqGidxIsRead) {
  QuantScheme s = scheme(Layout::kGptq, 4, 4, false, false);
  s.desc_act = true;
  Tensor g_idx = Tensor::zeros(DType::kI32, {8});
  const std::vector<int32_t> perm = {1, 0, 1, 0, 0, 1, 1, 0};
  std::memcpy(g_idx.writable_data, perm.data(), 32);
  StoredTensors stored = {
      {"qweight", words({1, 8}, std::vector<uint32_t>(8, 0x11111111u))},
      {"qzeros", words({2, 1}, {0, 0})},
      {"scales",
       Tensor::from_f32(DType::kF16, {2, 8},
                        std::vector<float>({1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2}))},
      {"g_idx", g_idx}};
  const QuantizedWeight w = unpack_ok(s, stored, 8, 8);
  EXPECT_EQ(w.g_idx, perm);
  std::vector<float> deq(64);
  dequantize(w, deq.data());
  EXPECT_EQ(deq[0], 2.0f);  // column 0 is in group 1 (scale 2), code 1 - zero 0
  EXPECT_EQ(deq[1], 1.0f);
}

// AWQ: nibble p of a word holds column 8c + [0,2,4,6,1,3,5,7][p]; zeros likewise.
TEST(FormatsBits, AwqInterleave) {
  const QuantScheme s = scheme(Layout::kAwq, 4, -1, false);
  StoredTensors stored = {{"qweight", words({8, 1}, std::vector<uint32_t>(8, 0x75316420u))},
                          {"qzeros", words({1, 1}, {0x75316420u})},
                          {"scales", ones(DType::kF16, {1, 8})}};
  const QuantizedWeight w = unpack_ok(s, stored, 8, 8);
  for (int j = 0; j < 8; ++j) {
    for (int c = 0; c < 8; ++c) EXPECT_EQ(w.codes[j * 8 + c], j);
    EXPECT_EQ(w.zeros[j], j);
  }
  const StoredTensors back = pack_ok(s, w);
  EXPECT_EQ(words_of(back.at("qweight")), std::vector<uint32_t>(8, 0x75316420u));
  EXPECT_EQ(words_of(back.at("qzeros")), std::vector<uint32_t>{0x75316420u});
}

// compressed-tensors pack_to_int32's own example: 8-bit [1, 2] -> [129, 130] -> 33409.
TEST(FormatsBits, CtPackedDocstringExample) {
  const QuantScheme s = scheme(Layout::kCtPacked, 8, -1, true);
  StoredTensors stored = {{"weight_packed", words({1, 1}, {33409u})},
                          {"weight_scale", ones(DType::kBF16, {1, 1})}};
  const QuantizedWeight w = unpack_ok(s, stored, 1, 2);
  EXPECT_EQ(w.codes, (std::vector<uint8_t>{129, 130}));
  EXPECT_EQ(w.zeros, std::vector<int32_t>{128});
  std::vector<float> deq(2);
  dequantize(w, deq.data());
  EXPECT_EQ(deq, (std::vector<float>{1, 2}));  // the signed q back
}

// compressed-tensors 3-bit: floor(32/3) = 10 values per word, no straddling.
TEST(FormatsBits, CtPacked3BitTenPerWord) {
  const QuantScheme s = scheme(Layout::kCtPacked, 3, -1, true);
  StoredTensors stored = {{"weight_packed", words({1, 2}, {0x08fac688u, 2u})},
                          {"weight_scale", ones(DType::kF16, {1, 1})}};
  const QuantizedWeight w = unpack_ok(s, stored, 1, 11);
  for (int c = 0; c < 11; ++c) EXPECT_EQ(w.codes[c], c % 8);
  EXPECT_EQ(words_of(pack_ok(s, w).at("weight_packed")), (std::vector<uint32_t>{0x08fac688u, 2u}));
}

// Asymmetric ct-pack: weight_zero_point [ceil(n/8), G] packed along n, already offset.
TEST(FormatsBits, CtPackedZeroPointAlongN) {
  const QuantScheme s = scheme(Layout::kCtPacked, 4, -1, false);
  StoredTensors stored = {{"weight_packed", words({9, 1}, std::vector<uint32_t>(9, 0))},
                          {"weight_scale", ones(DType::kF16, {9, 1})},
                          {"weight_zero_point", words({2, 1}, {0xa9876543u, 0xbu})}};
  const QuantizedWeight w = unpack_ok(s, stored, 9, 8);
  for (int j = 0; j < 9; ++j) EXPECT_EQ(w.zeros[j], (j + 3) % 16);
  EXPECT_EQ(words_of(pack_ok(s, w).at("weight_zero_point")),
            (std::vector<uint32_t>{0xa9876543u, 0xbu}));
}

// int-quantized: signed int8 q and zero point, both offset by 2^(b-1).
TEST(FormatsBits, CtIntSignedCodes) {
  const QuantScheme s = scheme(Layout::kCtInt, 4, -1, false);
  Tensor weight = Tensor::zeros(DType::kI8, {1, 2});
  weight.mutable_ptr<int8_t>()[0] = -8;
  weight.mutable_ptr<int8_t>()[1] = 7;
  Tensor zp = Tensor::zeros(DType::kI8, {1, 1});
  zp.mutable_ptr<int8_t>()[0] = -2;
  StoredTensors stored = {{"weight", weight},
                          {"weight_scale", Tensor::from_f32(DType::kF32, {1, 1}, {0.5f})},
                          {"weight_zero_point", zp}};
  const QuantizedWeight w = unpack_ok(s, stored, 1, 2);
  EXPECT_EQ(w.codes, (std::vector<uint8_t>{0, 15}));
  EXPECT_EQ(w.zeros, std::vector<int32_t>{6});
  std::vector<float> deq(2);
  dequantize(w, deq.data());
  EXPECT_EQ(deq, (std::vector<float>{-3, 4.5f}));  // 0.5 * (q - zp) = 0.5 * (-8 + 2), 0.5 * 9
}

// FP8 block scales: row j, column c use weight_scale_inv[j / bn, c / bk].
TEST(FormatsBits, Fp8BlockScales) {
  QuantScheme s = scheme(Layout::kFp8, 8, 0, true);
  s.block_n = 2;
  s.block_k = 4;
  Tensor weight = Tensor::from_f32(DType::kF8E4M3, {3, 5}, std::vector<float>(15, 1.0f));
  StoredTensors stored = {
      {"weight", weight},
      {"weight_scale_inv", Tensor::from_f32(DType::kF32, {2, 2}, {1, 2, 3, 4})}};
  const QuantizedWeight w = unpack_ok(s, stored, 3, 5);
  EXPECT_EQ(w.group_size, 4);
  EXPECT_EQ(w.scales, (std::vector<float>{1, 2, 1, 2, 3, 4}));
  std::vector<float> deq(15);
  dequantize(w, deq.data());
  EXPECT_EQ(deq[2 * 5 + 4], 4.0f);
  EXPECT_EQ(deq[1 * 5 + 3], 1.0f);
  const StoredTensors back = pack_ok(s, w);
  EXPECT_EQ(back.at("weight_scale_inv").to_f32(), (std::vector<float>{1, 2, 3, 4}));
}

// A per-tensor scale may be stored as shape [] or [1]; either way every row gets it.
TEST(FormatsBits, PerTensorScaleShapes) {
  const QuantScheme s = scheme(Layout::kFp8, 8, 0, true);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{}, std::vector<int64_t>{1}}) {
    StoredTensors stored = {
        {"weight", Tensor::from_f32(DType::kF8E4M3, {2, 3}, std::vector<float>(6, -2.0f))},
        {"weight_scale", Tensor::from_f32(DType::kF32, shape, {0.25f})}};
    const QuantizedWeight w = unpack_ok(s, stored, 2, 3);
    EXPECT_EQ(w.scales, (std::vector<float>{0.25f, 0.25f}));
    std::vector<float> deq(6);
    dequantize(w, deq.data());
    EXPECT_EQ(deq[5], -0.5f);
  }
}

TEST(FormatsBits, DescribeAndNames) {
  EXPECT_EQ(scheme(Layout::kGptq, 4, 128, true, true).describe(), "gptq int4 g128 sym zero-1");
  EXPECT_EQ(scheme(Layout::kAwq, 4, 128, false).describe(), "awq int4 g128 asym");
  EXPECT_EQ(scheme(Layout::kCtPacked, 8, -1, true).describe(), "ct-pack int8 per-channel sym");
  EXPECT_EQ(scheme(Layout::kFp8, 8, 0, true).describe(), "fp8 e4m3 per-tensor");
  QuantScheme block = scheme(Layout::kFp8, 8, 0, true);
  block.block_n = block.block_k = 128;
  EXPECT_EQ(block.describe(), "fp8 e4m3 block 128x128");
  EXPECT_EQ(QuantScheme{}.describe(), "dense");
  EXPECT_STREQ(layout_name(Layout::kCtInt), "ct-int");
  EXPECT_TRUE(block == block);
  EXPECT_FALSE(block == scheme(Layout::kFp8, 8, 0, true));
}

}  // namespace
}  // namespace qs::formats
