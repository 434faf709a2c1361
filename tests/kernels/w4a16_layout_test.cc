// The W4A16 GEMM's resident layout (kernels/cuda/w4a16_layout.h), on the CPU: checkpoints of
// every int layout that holds <= 4-bit codes (GPTQ, AWQ, compressed-tensors) are packed through
// the formats table and unpacked, repacked for the tensor cores, and read back lane by lane as
// the kernel's warps read them; that must give formats::dequantize bit for bit.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "formats/layouts.h"
#include "formats/rtn.h"
#include "kernels/cuda/w4a16_gemm.h"
#include "kernels/cuda/w4a16_layout.h"
#include "w4a16_glue.h"

namespace qs::kernels::cuda {
namespace {

using formats::Layout;
using formats::QuantizedWeight;

struct Case {
  Layout layout;
  int bits;
  int64_t group;  // -1 per channel
  bool sym;
  int64_t n, k;
  bool desc_act = false;
  bool zero_minus_one = false;
  DType scale_dtype = DType::kF16;

  formats::QuantScheme scheme() const {
    return {.layout = layout,
            .bits = bits,
            .group_size = group,
            .sym = sym,
            .zero_minus_one = zero_minus_one,
            .desc_act = desc_act};
  }
  std::string name() const {
    std::string s = scheme().describe() + " " + std::to_string(n) + "x" + std::to_string(k) + " " +
                    dtype_name(scale_dtype);
    for (char& ch : s) {
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return s;
  }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name();
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  struct Shape {
    int64_t n, k;
  };
  // Whole tiles, and shapes that pad n (not a multiple of 64) and k (not of 64, partial group).
  // GPTQ at 3 bits packs whole words only for n and k multiples of 32.
  const std::vector<Shape> gptq_shapes = {{128, 256}, {96, 160}};
  for (int bits : {2, 3, 4}) {
    for (int64_t group : {32, 64, 128, -1}) {
      for (bool sym : {true, false}) {
        for (const Shape& sh : gptq_shapes) {
          cases.push_back({Layout::kGptq, bits, group, sym, sh.n, sh.k});
          if (group > 0) cases.push_back({Layout::kGptq, bits, group, sym, sh.n, sh.k, true});
        }
        // compressed-tensors pads its words, so any n and k: 37 x 101 pads both and leaves a
        // partial last group; bf16 scales as llm-compressor writes them.
        cases.push_back({Layout::kCtPacked, bits, group, sym, 37, 101, false, false, DType::kBF16});
        if (group > 0) {
          cases.push_back(
              {Layout::kCtPacked, bits, group, sym, 64, 192, true, false, DType::kBF16});
        }
      }
    }
  }
  for (int64_t group : {32, 64, 128, -1}) {
    for (bool sym : {true, false}) {
      cases.push_back({Layout::kAwq, 4, group, sym, 72, 256});
    }
    // GPTQ v1 (zero - 1 stored): asymmetric zeros reach 2^bits = 16 (make_weight raises them).
    cases.push_back({Layout::kGptq, 4, group, false, 64, 128, false, true});
  }
  // f32 scales (compressed-tensors int-quantized checkpoints may store them).
  cases.push_back({Layout::kCtPacked, 4, 128, false, 40, 384, false, false, DType::kF32});
  return cases;
}

float round_to(DType t, float v) {
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  if (t == DType::kF16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// An RTN-quantized random weight as a checkpoint of `c` would hold it.
QuantizedWeight make_weight(const Case& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.n * 977 + c.k * 13 + c.bits * 3 + (c.sym ? 1 : 0)));
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> src(static_cast<size_t>(c.n * c.k));
  for (float& v : src) v = normal(rng);
  QuantizedWeight w = formats::rtn_quantize(src.data(), c.n, c.k, c.bits, c.group, c.sym);
  w.scale_dtype = c.scale_dtype;
  for (float& s : w.scales) s = round_to(c.scale_dtype, s);
  if (c.zero_minus_one) {
    // v1 cannot store zero 0; shifting every zero up by one reaches 2^bits, which the
    // unmasked +1 of v1 readers produces and the kernel's bf16 128 + zero must hold.
    for (int32_t& z : w.zeros) z += 1;
    w.zeros[0] = 16;  // at least one, whatever RTN chose
  }
  if (c.desc_act) {
    std::vector<int32_t> g_idx(static_cast<size_t>(c.k));
    for (int64_t col = 0; col < c.k; ++col) g_idx[col] = static_cast<int32_t>(col / w.group_size);
    std::shuffle(g_idx.begin(), g_idx.end(), rng);
    w.g_idx = g_idx;
  }
  return w;
}

// The weight through the checkpoint layout and back, as the loader sees it.
QuantizedWeight through_checkpoint(const Case& c, const QuantizedWeight& w) {
  const formats::QuantScheme scheme = c.scheme();
  Result<formats::StoredTensors> stored = formats::layout_def(c.layout).pack(scheme, w);
  QS_CHECK_MSG(stored.ok(), stored.status().message().c_str());
  Result<QuantizedWeight> back =
      formats::unpack("model.layers.0.mlp.up_proj", scheme, *stored, c.n, c.k);
  QS_CHECK_MSG(back.ok(), back.status().message().c_str());
  return std::move(*back);
}

class PackedLayout : public ::testing::TestWithParam<Case> {};

TEST_P(PackedLayout, ReadBackEqualsFormatsDequantize) {
  const Case& c = GetParam();
  const QuantizedWeight w = through_checkpoint(c, make_weight(c));
  std::vector<float> want(static_cast<size_t>(w.n * w.k));
  formats::dequantize(w, want.data());

  // The checkpoint's own scale type keeps the scales exact, and so does f32.
  for (W4ScaleType st : {scale_type_of(w.scale_dtype), W4ScaleType::kF32}) {
    const W4A16Glue glue = w4a16_glue(w, st);
    const W4A16Layout layout = w4a16_layout(glue.src);
    EXPECT_EQ(layout.n_pad % kW4PadN, 0);
    EXPECT_EQ(layout.k_pad % kW4PadK, 0);
    EXPECT_EQ(layout.has_perm, c.desc_act);
    EXPECT_EQ(layout.has_zeros, !c.sym);
    AlignedBuffer buf(layout.total_bytes);
    const W4A16View view = w4a16_pack(glue.src, buf.data.get());

    std::vector<float> got(want.size(), std::nanf(""));
    w4a16_dequantize_packed(view, got.data());
    for (int64_t j = 0; j < w.n; ++j) {
      for (int64_t col = 0; col < w.k; ++col) {
        const size_t i = static_cast<size_t>(j * w.k + col);
        ASSERT_EQ(got[i], want[i])
            << "output " << j << ", input " << col << ", scale type " << static_cast<int>(st);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIntLayout, PackedLayout, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return std::to_string(p.index) + "_" + p.param.name();
                         });

// The position of one code, worked out by hand from the header's description: output j = 21 is
// strip 1, half h = 0, fragment column g = 5; input c = 43 is tile 2, and within it 11 = 8r +
// 2t + e with r = 1, t = 1, e = 1. So lane 4g + t = 21, nibble (2h + r) + 4e = 5, word
// (1 * k_pad / 16 + 2) * 32 + 21.
TEST(W4A16Layout, OneCodeLandsWhereTheHeaderSays) {
  const int64_t n = 70, k = 100;  // n_pad 128, k_pad 128: 8 tiles of k per strip
  std::vector<uint8_t> codes(static_cast<size_t>(n * k), 0);
  codes[21 * k + 43] = 0xB;
  const std::vector<float> scales(static_cast<size_t>(n), 1.0f);
  W4A16Source src;
  src.n = n;
  src.k = k;
  src.group_size = 0;
  src.codes = codes.data();
  src.scales = scales.data();
  src.uniform_zero = 0;
  const W4A16Layout layout = w4a16_layout(src);
  ASSERT_EQ(layout.n_pad, 128);
  ASSERT_EQ(layout.k_pad, 128);
  AlignedBuffer buf(layout.total_bytes);
  const W4A16View v = w4a16_pack(src, buf.data.get());
  const int64_t word = (1 * 128 / 16 + 2) * 32 + 21;
  for (int64_t i = 0; i < layout.n_pad * layout.k_pad / 8; ++i) {
    EXPECT_EQ(v.qweight[i], i == word ? 0xBu << 20 : 0u) << "word " << i;
  }
  // The kernel's first step on that word: pair 1 (b1 of half 0) holds 128 + 11 in its high half
  // and 128 + 0 in its low half.
  EXPECT_EQ(w4_pair_bits(v.qweight[word], 1), 0x430B4300u);
}

// Padding: outputs past n get zero scales, inputs past k zero codes, so that the padded tiles
// add nothing whatever x holds there.
TEST(W4A16Layout, PaddingIsZero) {
  const int64_t n = 37, k = 101, group = 32;
  std::vector<uint8_t> codes(static_cast<size_t>(n * k), 0xF);
  const int64_t groups = (k + group - 1) / group;
  std::vector<float> scales(static_cast<size_t>(n * groups), 0.5f);
  std::vector<int32_t> zeros(scales.size(), 3);
  W4A16Source src;
  src.n = n;
  src.k = k;
  src.group_size = group;
  src.codes = codes.data();
  src.scales = scales.data();
  src.zeros = zeros.data();
  const W4A16Layout layout = w4a16_layout(src);
  EXPECT_EQ(layout.n_groups, 4);  // k_pad 128 in groups of 32
  AlignedBuffer buf(layout.total_bytes);
  std::fill(buf.data.get(), buf.data.get() + layout.total_bytes, 0xAA);
  const W4A16View v = w4a16_pack(src, buf.data.get());
  const auto* sc = static_cast<const float*>(v.scales);
  for (int64_t g = 0; g < layout.n_groups; ++g) {
    for (int64_t j = 0; j < layout.n_pad; ++j) {
      const bool real = j < n && g < groups;
      EXPECT_EQ(sc[g * layout.n_pad + j], real ? 0.5f : 0.0f) << g << ", " << j;
      EXPECT_EQ(v.zeros[g * layout.n_pad + j], real ? 3 : 0) << g << ", " << j;
    }
  }
  // Count the non-zero nibbles: exactly one per real code.
  int64_t set = 0;
  for (int64_t i = 0; i < layout.n_pad * layout.k_pad / 8; ++i) {
    for (int p = 0; p < 8; ++p) set += ((v.qweight[i] >> (4 * p)) & 0xF) != 0 ? 1 : 0;
  }
  EXPECT_EQ(set, n * k);
}

// The comparison above is not blind to the order inside a tile: exchanging two lanes' words
// of one tile (a fragment order the kernel would misread) changes what is read back.
TEST(W4A16Layout, ASwappedFragmentIsSeen) {
  Case c{Layout::kGptq, 4, 128, false, 64, 128};
  const QuantizedWeight w = through_checkpoint(c, make_weight(c));
  std::vector<float> want(static_cast<size_t>(w.n * w.k));
  formats::dequantize(w, want.data());
  const W4A16Glue glue = w4a16_glue(w, W4ScaleType::kF32);
  AlignedBuffer buf(w4a16_layout(glue.src).total_bytes);
  const W4A16View v = w4a16_pack(glue.src, buf.data.get());
  auto* words = const_cast<uint32_t*>(v.qweight);
  std::swap(words[1], words[4]);  // lane 1 (g 0, t 1) against lane 4 (g 1, t 0)
  std::vector<float> got(want.size());
  w4a16_dequantize_packed(v, got.data());
  EXPECT_NE(got, want);
}

// The sizes of a packed weight, without its buffers (the split choice reads nothing else).
W4A16View shape_of(int64_t n, int64_t k) {
  W4A16Source src;
  src.n = n;
  src.k = k;
  src.group_size = 128;
  const W4A16Layout l = w4a16_layout(src);
  W4A16View v;
  v.n = l.n;
  v.k = l.k;
  v.n_pad = l.n_pad;
  v.k_pad = l.k_pad;
  v.group_size = l.group_size;
  v.n_groups = l.n_groups;
  return v;
}

// The GEMM's split-K choice (host arithmetic): between 1 and kW4MaxSplits, never an empty
// split, at least 4 stages per split when it splits, more splits for decode than for prefill.
TEST(W4A16Splits, EverySplitHoldsWholeStages) {
  for (int64_t n : {64, 896, 4096, 14336}) {
    for (int64_t k : {64, 200, 896, 4096, 14336}) {
      const W4A16View v = shape_of(n, k);
      const int64_t stages = v.k_pad / kW4PadK;
      for (int64_t m : {1, 7, 16, 64, 512}) {
        for (int sms : {1, 108, 132}) {
          const int s = w4a16_choose_splits(v, m, sms);
          ASSERT_GE(s, 1);
          ASSERT_LE(s, kW4MaxSplits);
          const int64_t per_split = (stages + s - 1) / s;
          EXPECT_LT((s - 1) * per_split, stages) << n << "x" << k << " m=" << m;
          if (s > 1) {
            EXPECT_GE(per_split, 4);
            EXPECT_GE(w4a16_workspace_bytes(v, m, s), static_cast<size_t>(s * m * n * 4));
          }
        }
      }
    }
  }
  const W4A16View v = shape_of(4096, 4096);
  EXPECT_GT(w4a16_choose_splits(v, 1, 132), 1);  // 64 blocks over n alone on 132 SMs
  EXPECT_EQ(w4a16_choose_splits(v, 512, 132), 1);
}

}  // namespace
}  // namespace qs::kernels::cuda
