// Table-driven round trip of every stored layout: RTN-quantized random weights (or random fp8
// codes) -> pack -> check_stored -> unpack must give back exactly the QuantizedWeight we
// started from, and its dequantization must stay within one scale step of the source weights.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/layouts.h"
#include "formats/rtn.h"

namespace qs::formats {
namespace {

struct Case {
  Layout layout;
  int bits;
  int64_t group;  // -1 channel, 0 tensor (ct), > 0 group; fp8 block uses block_n/block_k
  bool sym;
  int64_t n, k;
  bool zero_minus_one = false;
  bool desc_act = false;
  DType scale_dtype = DType::kF16;
  int64_t block_n = 0, block_k = 0;

  QuantScheme scheme() const {
    return {.layout = layout,
            .bits = bits,
            .group_size = group,
            .sym = sym,
            .zero_minus_one = zero_minus_one,
            .desc_act = desc_act,
            .block_n = block_n,
            .block_k = block_k};
  }
  std::string name() const {
    std::string s = scheme().describe() + " " + std::to_string(n) + "x" + std::to_string(k) + " " +
                    dtype_name(scale_dtype);
    for (char& c : s) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    return s;
  }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name();
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  // (n, k, group): whole groups of each size, per channel, and a partial last group.
  struct Shape {
    int64_t n, k, group;
  };
  const std::vector<Shape> shapes = {
      {64, 256, 32}, {64, 256, 64}, {64, 256, 128}, {64, 256, -1}, {64, 160, 128}};
  for (int bits : {2, 3, 4, 8}) {
    for (const Shape& sh : shapes) {
      for (bool sym : {true, false}) {
        for (bool zmo : {false, true}) {
          cases.push_back({Layout::kGptq, bits, sh.group, sym, sh.n, sh.k, zmo});
        }
        // desc_act: a permuted g_idx (groups > 1 only).
        if (sh.group > 0)
          cases.push_back({Layout::kGptq, bits, sh.group, sym, sh.n, sh.k, false, true});
        // compressed-tensors stores scales in the model dtype (bf16 here).
        for (Layout ct : {Layout::kCtPacked, Layout::kCtInt}) {
          cases.push_back({ct, bits, sh.group, sym, sh.n, sh.k, false, false, DType::kBF16});
        }
        if (sh.group > 0) {
          cases.push_back(
              {Layout::kCtPacked, bits, sh.group, sym, sh.n, sh.k, false, true, DType::kBF16});
        }
        if (bits == 4 && sh.k % (sh.group > 0 ? sh.group : sh.k) == 0) {
          cases.push_back({Layout::kAwq, 4, sh.group, sym, sh.n, sh.k});
        }
      }
    }
    for (bool sym : {true, false}) {
      // Shapes that are no multiple of the values per word (ct pads the last word), the
      // tensor strategy, and f32 scales.
      cases.push_back({Layout::kCtPacked, bits, 32, sym, 37, 101});
      cases.push_back({Layout::kCtInt, bits, 32, sym, 37, 101, false, false, DType::kF32});
      cases.push_back({Layout::kCtPacked, bits, 0, sym, 24, 96});
      cases.push_back({Layout::kCtInt, bits, 0, sym, 24, 96});
    }
  }
  for (DType dt : {DType::kF32, DType::kBF16}) {
    cases.push_back({Layout::kFp8, 8, 0, true, 48, 96, false, false, dt});
    cases.push_back({Layout::kFp8, 8, -1, true, 48, 96, false, false, dt});
    cases.push_back({Layout::kFp8, 8, 32, true, 48, 100, false, false, dt});
    cases.push_back({Layout::kFp8, 8, 0, true, 200, 300, false, false, dt, 128, 128});
    cases.push_back({Layout::kFp8, 8, 0, true, 70, 90, false, false, dt, 16, 32});
  }
  return cases;
}

float round_to(DType t, float v) {
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  if (t == DType::kF16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// The source weights and the QuantizedWeight that `c` should store.
QuantizedWeight make_weight(const Case& c, std::vector<float>* src) {
  std::mt19937 rng(static_cast<uint32_t>(c.n * 131 + c.k * 7 + c.bits));
  std::normal_distribution<float> normal(0.0f, 0.02f);
  src->resize(static_cast<size_t>(c.n * c.k));
  for (float& v : *src) v = normal(rng);
  QuantScheme s = c.scheme();
  if (c.layout == Layout::kFp8) {
    QuantizedWeight w;
    w.n = c.n;
    w.k = c.k;
    w.bits = 8;
    w.code_type = CodeType::kFp8E4m3;
    w.group_size = c.block_k > 0 ? c.block_k : s.group_for(c.k);
    w.scale_dtype = c.scale_dtype;
    const int64_t g = w.n_groups();
    std::vector<float> shared(static_cast<size_t>(c.n * g));
    // |src| / scale stays well inside e4m3's +-448.
    for (float& v : shared) v = round_to(c.scale_dtype, std::abs(normal(rng)) * 0.05f + 3e-4f);
    w.scales.resize(shared.size());
    for (int64_t j = 0; j < c.n; ++j) {
      for (int64_t gi = 0; gi < g; ++gi) {
        int64_t from = j;
        if (c.block_n > 0) from = j / c.block_n * c.block_n;
        if (c.group == 0 && c.block_n == 0) from = 0;
        w.scales[j * g + gi] = shared[from * g + gi];
      }
    }
    w.zeros.assign(shared.size(), 0);
    w.codes.resize(static_cast<size_t>(c.n * c.k));
    for (int64_t i = 0; i < c.n * c.k; ++i) {
      w.codes[i] = f32_to_fp8_e4m3((*src)[i] / w.scales[(i / c.k) * g + w.group_of(i % c.k)]);
    }
    return w;
  }
  QuantizedWeight w = rtn_quantize(src->data(), c.n, c.k, c.bits, c.group, c.sym);
  w.scale_dtype = c.scale_dtype;
  for (float& scale : w.scales) scale = round_to(c.scale_dtype, scale);
  if (c.desc_act) {
    // Act-order: the columns of each group are scattered over k, as GPTQ's permutation does.
    std::vector<int32_t> g_idx(static_cast<size_t>(c.k));
    for (int64_t col = 0; col < c.k; ++col) g_idx[col] = static_cast<int32_t>(col / w.group_size);
    std::shuffle(g_idx.begin(), g_idx.end(), rng);
    w.g_idx = g_idx;
  }
  return w;
}

bool has_zero_zero(const QuantizedWeight& w) {
  for (int32_t z : w.zeros) {
    if (z == 0) return true;
  }
  return false;
}

class RoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(RoundTrip, PackCheckUnpackIsExact) {
  const Case& c = GetParam();
  const QuantScheme scheme = c.scheme();
  std::vector<float> src;
  QuantizedWeight w = make_weight(c, &src);
  ASSERT_TRUE(w.validate().ok()) << w.validate().message();

  Result<StoredTensors> stored = layout_def(c.layout).pack(scheme, w);
  // GPTQ v1 cannot hold zero 0 (zero-1 would be -1): pack must refuse rather than corrupt;
  // the round trip then goes on with those zeros moved to 1.
  const bool moved_zeros = c.zero_minus_one && has_zero_zero(w);
  if (moved_zeros) {
    ASSERT_FALSE(stored.ok());
    EXPECT_NE(stored.status().message().find("cannot store zero 0"), std::string::npos)
        << stored.status().message();
    for (int32_t& z : w.zeros) z = std::max(z, 1);
    stored = layout_def(c.layout).pack(scheme, w);
  }
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  const std::string prefix = "model.layers.0.mlp.up_proj";
  Status checked = check_stored(prefix, scheme, *stored, c.n, c.k);
  ASSERT_TRUE(checked.ok()) << checked.message();

  Result<QuantizedWeight> back = unpack(prefix, scheme, *stored, c.n, c.k);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->n, w.n);
  EXPECT_EQ(back->k, w.k);
  EXPECT_EQ(back->bits, w.bits);
  EXPECT_EQ(back->code_type, w.code_type);
  EXPECT_EQ(back->group_size, w.group_size);
  EXPECT_EQ(back->scale_dtype, w.scale_dtype);
  EXPECT_EQ(back->codes, w.codes);
  EXPECT_EQ(back->scales, w.scales);
  EXPECT_EQ(back->zeros, w.zeros);
  EXPECT_EQ(back->g_idx, w.g_idx);

  // Dequantized, every value is within one scale step of the source (a step and a bit when
  // the f16 scales RTN chose were rounded to bf16; fp8 within its relative precision).
  // Act-order g_idx regroups columns RTN grouped contiguously, so the source no longer bounds
  // them (nor does it bound groups whose zero was moved).
  if (c.desc_act || moved_zeros) return;
  std::vector<float> deq(src.size());
  dequantize(*back, deq.data());
  const float steps = c.scale_dtype == DType::kBF16 ? 1.3f : 1.001f;
  for (int64_t j = 0; j < c.n; ++j) {
    for (int64_t col = 0; col < c.k; ++col) {
      const int64_t i = j * c.k + col;
      const float s = std::abs(back->scales[j * back->n_groups() + back->group_of(col)]);
      const float bound = c.layout == Layout::kFp8 ? std::abs(src[i]) / 16 + s / 256 : s * steps;
      ASSERT_LE(std::abs(deq[i] - src[i]), bound) << "at [" << j << ", " << col << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, RoundTrip, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return std::to_string(p.index) + "_" + p.param.name();
                         });

}  // namespace
}  // namespace qs::formats
