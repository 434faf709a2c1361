// formats: tensor-parallel shards of a QuantizedWeight (slice_rows / slice_cols) dequantize to
// the same slice of the whole weight's dequantization, groups stay whole, and splits that would
// cut a group or scatter act-order groups are refused with the reason.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "formats/quantized_weight.h"

namespace qs::formats {
namespace {

QuantizedWeight random_weight(int64_t n, int64_t k, int64_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedWeight w;
  w.n = n;
  w.k = k;
  w.bits = 4;
  w.group_size = group;
  w.codes.resize(n * k);
  for (auto& c : w.codes) c = static_cast<uint8_t>(rng() % 16);
  const int64_t g = w.n_groups();
  w.scales.resize(n * g);
  w.zeros.resize(n * g);
  for (auto& s : w.scales) s = 0.01f * static_cast<float>(1 + rng() % 50);
  for (auto& z : w.zeros) z = static_cast<int32_t>(rng() % 16);
  return w;
}

std::vector<float> dense(const QuantizedWeight& w) {
  std::vector<float> out(w.n * w.k);
  dequantize(w, out.data());
  return out;
}

TEST(FormatsShard, RowsDequantizeToTheSameRows) {
  const QuantizedWeight w = random_weight(12, 256, 128, 1);
  const std::vector<float> whole = dense(w);
  const QuantizedWeight s = slice_rows(w, 4, 6);
  ASSERT_TRUE(s.validate().ok());
  const std::vector<float> part = dense(s);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 256; ++c) EXPECT_EQ(part[r * 256 + c], whole[(r + 4) * 256 + c]);
}

TEST(FormatsShard, ColumnsOnGroupBoundariesDequantizeToTheSameColumns) {
  // The last group is partial (k = 320 in groups of 128): a slice may end at k.
  const QuantizedWeight w = random_weight(5, 320, 128, 2);
  const std::vector<float> whole = dense(w);
  for (const auto& [c0, cols] : {std::pair<int64_t, int64_t>{0, 128}, {128, 192}, {256, 64}}) {
    auto s = slice_cols(w, c0, cols);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    ASSERT_TRUE(s->validate().ok());
    EXPECT_EQ(s->k, cols);
    const std::vector<float> part = dense(*s);
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(part[r * cols + c], whole[r * 320 + c0 + c]);
  }
}

TEST(FormatsShard, OneGroupSplitsAnywhere) {
  // Per-channel scales: a single group as wide as k.
  const QuantizedWeight w = random_weight(3, 96, 96, 3);
  const std::vector<float> whole = dense(w);
  auto s = slice_cols(w, 40, 50);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->group_size, 50);
  const std::vector<float> part = dense(*s);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 50; ++c) EXPECT_EQ(part[r * 50 + c], whole[r * 96 + 40 + c]);
}

TEST(FormatsShard, CuttingAGroupIsRefused) {
  const QuantizedWeight w = random_weight(4, 256, 128, 4);
  auto start = slice_cols(w, 64, 128);
  ASSERT_FALSE(start.ok());
  EXPECT_NE(start.status().message().find("cut a quantization group of 128"), std::string::npos)
      << start.status().message();
  EXPECT_FALSE(slice_cols(w, 0, 64).ok());  // ends inside the first group
}

TEST(FormatsShard, ActOrderColumnsAreRefused) {
  QuantizedWeight w = random_weight(4, 64, 32, 5);
  w.g_idx.resize(64);
  for (int64_t c = 0; c < 64; ++c) w.g_idx[c] = static_cast<int32_t>((c * 7) % 2);
  auto s = slice_cols(w, 0, 32);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("act-order"), std::string::npos);
  // Rows keep every column, so they split as usual.
  EXPECT_TRUE(slice_rows(w, 0, 2).validate().ok());
}

}  // namespace
}  // namespace qs::formats
