// Tests of ops::linear on quantized weights (ops::QuantMatrix): every ISA this CPU has and 1
// and 3 threads against kernels::ref::qlinear_int8 (+ bias); the dequantized bf16 fallback
// (fp8 codes, group size 16) against its own dequantization through the dense reference; the
// resident size of int4 g128; and errors, never crashes, for malformed weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../common/isa_skip.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "kernels/cpu/isa.h"
#include "kernels/qmatrix.h"
#include "kernels/ref/linear_ref.h"
#include "kernels/ref/qlinear_ref.h"
#include "ops/linear.h"
#include "ops/quant_matrix.h"

namespace qs {
namespace {

using formats::QuantizedWeight;
using kernels::Isa;

QuantizedWeight random_weight(int64_t n, int64_t k, int bits, int64_t group, bool sym,
                              uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedWeight w;
  w.n = n;
  w.k = k;
  w.bits = bits;
  w.group_size = group;
  const int levels = 1 << bits;
  std::uniform_int_distribution<int> code(0, levels - 1), zero(0, levels - 1);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  w.codes.resize(static_cast<size_t>(n * k));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(code(rng));
  w.scales.resize(static_cast<size_t>(n * w.n_groups()));
  for (float& s : w.scales) s = scale(rng);
  w.zeros.resize(w.scales.size());
  for (int32_t& z : w.zeros) z = sym ? levels / 2 : zero(rng);
  return w;
}

std::vector<float> random_values(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

formats::QuantScheme scheme_of(const QuantizedWeight& w) {
  formats::QuantScheme s;
  s.layout = formats::Layout::kGptq;
  s.bits = w.bits;
  s.group_size = w.group_size;
  return s;
}

std::vector<Isa> supported_isas() {
  return testing_util::runnable_isas({Isa::kRef, Isa::kAvx2, Isa::kAvx512});
}

struct Case {
  int64_t m, n, k;
  int bits;
  int64_t group;
};

// Both sides of the GEMV/GEMM switch (kQGemmMinRows) and of the inline/parallel threshold.
const Case kCases[] = {
    {1, 896, 896, 4, 128}, {1, 7, 64, 8, 896},     {3, 200, 896, 4, 32},
    {16, 64, 896, 8, 64},  {33, 130, 512, 3, 128}, {1, 64, 4864, 4, 128},
};

TEST(QuantLinear, EveryIsaAndThreadCountMatchesTheReference) {
  for (const Case& c : kCases) {
    const QuantizedWeight w = random_weight(c.n, c.k, c.bits, c.group, c.m % 2 == 1, 7);
    auto made = ops::QuantMatrix::make(scheme_of(w), w);
    ASSERT_TRUE(made.ok()) << made.status().message();
    const ops::LinearWeight lw(*made);
    ASSERT_TRUE((*made)->packed());
    const kernels::QMatrixView& view = (*made)->view();

    const std::vector<float> x = random_values(static_cast<size_t>(c.m * c.k), 3);
    const std::vector<float> bias = random_values(static_cast<size_t>(c.n), 4);
    std::unique_ptr<void, decltype(&std::free)> buf(
        std::aligned_alloc(64, kernels::qacts_bytes(view, c.m)), &std::free);
    const kernels::QActsView a = kernels::quantize_acts(view, x.data(), c.m, buf.get());
    std::vector<float> expect(static_cast<size_t>(c.m * c.n));
    kernels::ref::qlinear_int8(view, a, 0, c.n, expect.data());
    float y_max = 0;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        expect[i * c.n + j] += bias[j];
        y_max = std::max(y_max, std::fabs(expect[i * c.n + j]));
      }
    }
    for (Isa isa : supported_isas()) {
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        std::vector<float> y(expect.size(), NAN);
        ASSERT_TRUE(ops::linear_with_isa(isa, x.data(), c.m, lw, bias.data(), y.data(), pool).ok());
        for (size_t e = 0; e < y.size(); ++e) {
          // Summation order only (see qlinear_test.cc for the per-term bound); 2e-5 of the
          // largest output is far below the ~1e-2 a wrong block would cost.
          ASSERT_NEAR(y[e], expect[e], 2e-5 * y_max)
              << kernels::isa_name(isa) << " threads=" << threads << " m=" << c.m << " n=" << c.n
              << " k=" << c.k << " bits=" << c.bits << " at " << e;
        }
      }
    }
  }
}

// The fallback computes with bf16(dequantize(w)); check it against that, through the dense
// reference kernel.
void check_fallback(const QuantizedWeight& w, const std::string& reason) {
  auto made = ops::QuantMatrix::make(scheme_of(w), w);
  ASSERT_TRUE(made.ok()) << made.status().message();
  const ops::QuantMatrix& q = **made;
  ASSERT_FALSE(q.packed());
  EXPECT_EQ(q.kernel(), "dequantized bf16: " + reason);
  EXPECT_EQ(q.resident_bytes(), static_cast<size_t>(w.n * w.k * 2));

  std::vector<float> dense(static_cast<size_t>(w.n * w.k));
  for (int64_t j = 0; j < w.n; ++j) {
    for (int64_t c = 0; c < w.k; ++c) {
      const size_t at = static_cast<size_t>(j * w.n_groups() + c / w.group_size);
      const uint8_t code = w.codes[j * w.k + c];
      dense[j * w.k + c] = w.code_type == formats::CodeType::kFp8E4m3
                               ? w.scales[at] * fp8_e4m3_to_f32(code)
                               : w.scales[at] * static_cast<float>(code - w.zeros[at]);
    }
  }
  const Tensor expect_w = Tensor::from_f32(DType::kBF16, {w.n, w.k}, dense);
  const int64_t m = 5;
  const std::vector<float> x = random_values(static_cast<size_t>(m * w.k), 9);
  std::vector<float> expect(static_cast<size_t>(m * w.n)), y(expect.size());
  kernels::ref::linear(x.data(), m, w.k, expect_w.data, DType::kBF16, w.n, 0, w.n, expect.data());
  ThreadPool pool(2);
  ASSERT_TRUE(ops::linear(x.data(), m, ops::LinearWeight(*made), nullptr, y.data(), pool).ok());
  float y_max = 0;
  for (float v : expect) y_max = std::max(y_max, std::fabs(v));
  for (size_t e = 0; e < y.size(); ++e) ASSERT_NEAR(y[e], expect[e], 2e-6 * y_max) << e;
}

// fp8 weights stay packed at one byte (their kernels: qlinear_w8a8_test.cc); odd groups fall
// back to a dequantized bf16 copy.
TEST(QuantLinear, OddGroupsRunDequantizedBf16) {
  QuantizedWeight fp8 = random_weight(40, 96, 8, 96, true, 5);
  fp8.code_type = formats::CodeType::kFp8E4m3;
  fp8.zeros.assign(fp8.zeros.size(), 0);
  for (uint8_t& c : fp8.codes) {
    if ((c & 0x7F) == 0x7F) c = 0x3F;  // e4m3fn's NaN patterns are not weights
  }
  auto made = ops::QuantMatrix::make(scheme_of(fp8), fp8);
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_TRUE((*made)->packed());
  fp8.g_idx.assign(96, 0);
  check_fallback(fp8, "fp8 with a g_idx");
  check_fallback(random_weight(24, 80, 4, 16, false, 6), "group size 16 is not a multiple of 32");
}

TEST(QuantLinear, Int4G128IsUnderAThirdOfBf16) {
  const QuantizedWeight w = random_weight(896, 4864, 4, 128, true, 1);
  auto made = ops::QuantMatrix::make(scheme_of(w), w);
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE((*made)->packed());
  const auto bf16_bytes = static_cast<double>(w.n * w.k * 2);
  EXPECT_LE(static_cast<double>((*made)->resident_bytes()), 0.3 * bf16_bytes);
  EXPECT_EQ((*made)->view().zero_terms, nullptr);  // symmetric: no zero-term table
  EXPECT_NE((*made)->kernel().find("int4 g128"), std::string::npos) << (*made)->kernel();
}

TEST(QuantLinear, KernelNameSaysWhenNarrowCodesRunAsInt4) {
  const QuantizedWeight w = random_weight(8, 256, 3, 128, false, 4);
  auto made = ops::QuantMatrix::make(scheme_of(w), w);
  ASSERT_TRUE(made.ok());
  EXPECT_EQ((*made)->kernel().rfind("int3 as int4 g128 (", 0), 0u) << (*made)->kernel();
}

TEST(QuantLinear, MalformedWeightsAreErrors) {
  const QuantizedWeight good = random_weight(8, 64, 4, 32, false, 2);
  ASSERT_TRUE(ops::QuantMatrix::make(scheme_of(good), good).ok());
  QuantizedWeight w = good;
  w.codes.pop_back();
  EXPECT_FALSE(ops::QuantMatrix::make(scheme_of(w), w).ok());
  w = good;
  w.codes[3] = 16;
  EXPECT_FALSE(ops::QuantMatrix::make(scheme_of(w), w).ok());
  w = good;
  w.scales.resize(8);
  EXPECT_FALSE(ops::QuantMatrix::make(scheme_of(w), w).ok());
  w = good;
  w.g_idx.assign(64, 0);
  w.g_idx[5] = 2;
  EXPECT_FALSE(ops::QuantMatrix::make(scheme_of(w), w).ok());
  w = good;
  w.scales[1] = NAN;
  EXPECT_FALSE(ops::QuantMatrix::make(scheme_of(w), w).ok());
  w = good;
  w.n = 0;
  w.codes.clear();
  w.scales.clear();
  w.zeros.clear();
  EXPECT_FALSE(ops::QuantMatrix::make(scheme_of(w), w).ok());
}

TEST(QuantLinear, PerChannelGroupSizesAllMeanOneGroup) {
  for (int64_t group : {int64_t{-1}, int64_t{0}, int64_t{100}, int64_t{4096}}) {
    QuantizedWeight w = random_weight(16, 100, 8, 100, true, 3);
    w.group_size = group;
    auto made = ops::QuantMatrix::make(scheme_of(w), w);
    ASSERT_TRUE(made.ok()) << group << ": " << made.status().message();
    ASSERT_TRUE((*made)->packed());
    EXPECT_EQ((*made)->view().n_groups, 1);
    EXPECT_NE((*made)->kernel().find("per-channel"), std::string::npos);
  }
}

}  // namespace
}  // namespace qs
