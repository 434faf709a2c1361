// Kernel consistency tests for ops::linear: every ISA this CPU has (ref, avx2, avx512) x
// weight dtype (F32, F16, BF16) x awkward shapes x bias x 1 and 2 threads, against the
// scalar oracle kernels::ref::linear. The weights are widened exactly (bf16 and f16 are
// subsets of f32), so every dtype has the same tolerance: only the summation order differs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../common/isa_skip.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/ref/linear_ref.h"
#include "ops/linear.h"

namespace qs {
namespace {

using kernels::Isa;

// Two f32 sums of the same k products in different orders differ by at most ~k * 2^-24 of
// sum |x||w| (the worst case); random signs make it ~sqrt(k) * 2^-24. 2e-6 sits between:
// a wrong element or a dropped product is off by ~1e-2 relative and fails clearly.
constexpr double kRelTolerance = 2e-6;

struct Case {
  int64_t m, n, k;
};

// Odd and prime sizes, k below one vector, k spanning several 1024-wide GEMM k blocks, n not
// a multiple of any panel width, m on both sides of the GEMV/GEMM switch and of the tiles.
const Case kCases[] = {
    {1, 1, 1},      {1, 7, 5},      {1, 33, 16},   {1, 100, 300},  {2, 19, 15},   {3, 64, 17},
    {7, 37, 129},   {8, 130, 64},   {9, 33, 40},   {16, 31, 7},    {16, 96, 513}, {33, 47, 255},
    {33, 65, 257},  {128, 100, 96}, {128, 17, 33}, {13, 160, 600}, {5, 1, 1000},  {9, 70, 1030},
    {20, 33, 2100}, {80, 300, 96},  // where AMX is, ops::linear runs bf16 on the AMX GEMM (n >=
                                    // 256, k % 32 == 0)
};

std::string dtype_label(DType t) {
  return dtype_name(t);
}

void check_linear(Isa isa, DType dtype, const Case& c, bool with_bias, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(c.m * 7919 + c.n * 104729 + c.k * 31 + with_bias));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(c.m * c.k)), w_values(static_cast<size_t>(c.n * c.k));
  std::vector<float> bias(static_cast<size_t>(c.n));
  for (float& v : x) v = normal(rng);
  for (float& v : w_values) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  const Tensor w = Tensor::from_f32(dtype, {c.n, c.k}, w_values);

  std::vector<float> expect(static_cast<size_t>(c.m * c.n));
  kernels::ref::linear(x.data(), c.m, c.k, w.data, dtype, c.n, 0, c.n, expect.data());
  if (with_bias) {
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) expect[i * c.n + j] += bias[j];
  }

  std::vector<double> abs_sum(expect.size());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double t = with_bias ? std::fabs(bias[j]) : 0.0;
      for (int64_t kk = 0; kk < c.k; ++kk)
        t += std::fabs(x[i * c.k + kk] * load_as_f32(dtype, w.data, j * c.k + kk));
      abs_sum[i * c.n + j] = t;
    }
  }
  auto compare = [&](const std::vector<float>& got, const std::string& what) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        const double err = std::fabs(static_cast<double>(got[i * c.n + j]) - expect[i * c.n + j]);
        ASSERT_LE(err, kRelTolerance * abs_sum[i * c.n + j])
            << what << " " << kernels::isa_name(isa) << " " << dtype_name(dtype) << " m=" << c.m
            << " n=" << c.n << " k=" << c.k << " bias=" << with_bias << " threads=" << threads
            << " at [" << i << ", " << j << "]: got " << got[i * c.n + j] << " want "
            << expect[i * c.n + j];
      }
    }
  };

  // NaN-filled output: a kernel that skips an element cannot pass by accident.
  std::vector<float> got(expect.size(), std::nanf(""));
  ThreadPool pool(threads);
  const Status st = ops::linear_with_isa(isa, x.data(), c.m, w, with_bias ? bias.data() : nullptr,
                                         got.data(), pool);
  ASSERT_TRUE(st.ok()) << st.to_string();
  compare(got, "ops::linear");

  // ops::linear picks GEMV or GEMM by m; call both kernels directly so that each is tested
  // at every m, over a column range split at an odd place (threads may split anywhere).
  using Kernel = void (*)(const kernels::cpu::LinearArgs&, int64_t, int64_t);
  std::vector<std::pair<Kernel, const char*>> direct;
  if (isa == Isa::kAvx512) {
    direct = {{kernels::cpu::linear_gemv_avx512, "gemv"},
              {kernels::cpu::linear_gemm_avx512, "gemm"}};
  } else if (isa == Isa::kAvx2) {
    direct = {{kernels::cpu::linear_gemv_avx2, "gemv"}, {kernels::cpu::linear_gemm_avx2, "gemm"}};
  }
  const kernels::cpu::LinearArgs args{
      x.data(), c.m, c.k, w.data, dtype, c.n, with_bias ? bias.data() : nullptr, nullptr};
  for (const auto& [kernel, name] : direct) {
    std::vector<float> y(expect.size(), std::nanf(""));
    kernels::cpu::LinearArgs a = args;
    a.y = y.data();
    const int64_t split = c.n * threads / 3;  // a third or two thirds in: off any grain
    if (split > 0) kernel(a, 0, split);
    kernel(a, split, c.n);
    compare(y, name);
  }
}

class LinearKernels : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

TEST_P(LinearKernels, MatchesReference) {
  const auto [isa, dtype] = GetParam();
  if (!kernels::isa_supported(isa)) GTEST_SKIP() << "this CPU lacks " << kernels::isa_name(isa);
  for (const Case& c : kCases) {
    for (bool with_bias : {false, true}) {
      for (int threads : {1, 2}) {
        check_linear(isa, dtype, c, with_bias, threads);
        if (HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsasAndDtypes, LinearKernels,
                         ::testing::Combine(::testing::Values(Isa::kRef, Isa::kAvx2, Isa::kAvx512),
                                            ::testing::Values(DType::kF32, DType::kF16,
                                                              DType::kBF16)),
                         [](const auto& param_info) {
                           return std::string(kernels::isa_name(std::get<0>(param_info.param))) +
                                  "_" + dtype_label(std::get<1>(param_info.param));
                         });

// Special values pass through: an inf weight gives inf, not a wrong finite number.
TEST(LinearKernels, InfinityPropagates) {
  for (Isa isa : testing_util::runnable_isas({Isa::kAvx2, Isa::kAvx512})) {
    for (int64_t m : {1, 20}) {
      std::vector<float> x(static_cast<size_t>(m * 40), 1.0f), w_values(3 * 40, 0.5f);
      w_values[1 * 40 + 39] = INFINITY;  // row 1, last k: lands in the vector tail
      const Tensor w = Tensor::from_f32(DType::kBF16, {3, 40}, w_values);
      std::vector<float> y(static_cast<size_t>(m * 3));
      ThreadPool pool(1);
      ASSERT_TRUE(ops::linear_with_isa(isa, x.data(), m, w, nullptr, y.data(), pool).ok());
      for (int64_t i = 0; i < m; ++i) {
        EXPECT_FLOAT_EQ(y[i * 3 + 0], 20.0f);
        EXPECT_TRUE(std::isinf(y[i * 3 + 1]));
        EXPECT_FLOAT_EQ(y[i * 3 + 2], 20.0f);
      }
    }
  }
}

TEST(LinearKernels, RejectsBadWeights) {
  ThreadPool pool(1);
  std::vector<float> x(4), y(4);
  const Tensor w3 = Tensor::zeros(DType::kF32, {1, 2, 2});
  EXPECT_FALSE(ops::linear(x.data(), 1, w3, nullptr, y.data(), pool).ok());
  const Tensor wi = Tensor::zeros(DType::kI32, {2, 2});
  EXPECT_FALSE(ops::linear(x.data(), 1, wi, nullptr, y.data(), pool).ok());
}

TEST(LinearKernels, EmptyKGivesBias) {
  ThreadPool pool(2);
  const Tensor w = Tensor::zeros(DType::kBF16, {3, 0});
  std::vector<float> bias = {1.0f, 2.0f, 3.0f}, y(6, NAN);
  ASSERT_TRUE(ops::linear(nullptr, 2, w, bias.data(), y.data(), pool).ok());
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 1, 2, 3}));
}

TEST(Isa, ParseAndNames) {
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512})
    EXPECT_EQ(kernels::parse_isa(kernels::isa_name(isa)), isa);
  EXPECT_FALSE(kernels::parse_isa("sse9").has_value());
  EXPECT_TRUE(kernels::isa_supported(Isa::kRef));
  EXPECT_TRUE(kernels::isa_supported(kernels::active_isa()));
}

}  // namespace
}  // namespace qs
