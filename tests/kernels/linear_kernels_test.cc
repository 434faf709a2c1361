// Kernel consistency tests for ops::linear: every ISA this CPU has (ref, avx2, avx512) x
// weight dtype (F32, F16, BF16) x awkward shapes x bias x 1 and 2 threads, and the Highway
// GEMV, GEMM and pair-panel GEMM (linear_hwy.cc) called directly on every target they are
// compiled for, against the scalar oracle kernels::ref::linear. The weights are widened exactly
// (bf16 and f16 are subsets of f32), so every dtype has the same tolerance: only the summation
// order differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../common/isa_skip.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/elementwise_cpu.h"
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

// One random problem and its oracle: y = x w^T (+ bias) by kernels::ref::linear, and per
// element sum_k |x w| (+ |bias|), the scale of the summation-order error.
struct Problem {
  std::vector<float> x, bias, expect;
  std::vector<double> abs_sum;
  Tensor w;
};

Problem make_problem(DType dtype, const Case& c, bool with_bias) {
  Problem p;
  std::mt19937 rng(static_cast<uint32_t>(c.m * 7919 + c.n * 104729 + c.k * 31 + with_bias));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.x.resize(static_cast<size_t>(c.m * c.k));
  std::vector<float> w_values(static_cast<size_t>(c.n * c.k));
  p.bias.resize(static_cast<size_t>(c.n));
  for (float& v : p.x) v = normal(rng);
  for (float& v : w_values) v = normal(rng);
  for (float& v : p.bias) v = normal(rng);
  p.w = Tensor::from_f32(dtype, {c.n, c.k}, w_values);

  p.expect.resize(static_cast<size_t>(c.m * c.n));
  kernels::ref::linear(p.x.data(), c.m, c.k, p.w.data, dtype, c.n, 0, c.n, p.expect.data());
  if (with_bias) {
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) p.expect[i * c.n + j] += p.bias[j];
  }
  p.abs_sum.resize(p.expect.size());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double t = with_bias ? std::fabs(p.bias[j]) : 0.0;
      for (int64_t kk = 0; kk < c.k; ++kk)
        t += std::fabs(p.x[i * c.k + kk] * load_as_f32(dtype, p.w.data, j * c.k + kk));
      p.abs_sum[i * c.n + j] = t;
    }
  }
  return p;
}

// Every element within kRelTolerance of the oracle; `what` names the kernel in a failure.
void compare(const Problem& p, const Case& c, const std::vector<float>& got,
             const std::string& what) {
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      const double err = std::fabs(static_cast<double>(got[i * c.n + j]) - p.expect[i * c.n + j]);
      ASSERT_LE(err, kRelTolerance * p.abs_sum[i * c.n + j])
          << what << " " << dtype_name(p.w.dtype) << " m=" << c.m << " n=" << c.n << " k=" << c.k
          << " at [" << i << ", " << j << "]: got " << got[i * c.n + j] << " want "
          << p.expect[i * c.n + j];
    }
  }
}

void check_linear(Isa isa, DType dtype, const Case& c, bool with_bias, int threads) {
  const Problem p = make_problem(dtype, c, with_bias);
  // NaN-filled output: a kernel that skips an element cannot pass by accident.
  std::vector<float> got(p.expect.size(), std::nanf(""));
  ThreadPool pool(threads);
  const Status st = ops::linear_with_isa(isa, p.x.data(), c.m, p.w,
                                         with_bias ? p.bias.data() : nullptr, got.data(), pool);
  ASSERT_TRUE(st.ok()) << st.to_string();
  compare(p, c, got,
          std::string("ops::linear ") + kernels::isa_name(isa) +
              " bias=" + std::to_string(with_bias) + " threads=" + std::to_string(threads));
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

// The Highway kernels (linear_hwy.cc) on every target they are compiled for, called directly:
// ops::linear picks GEMV or GEMM by m and one target per ISA, so each kernel is tested here at
// every m, over column ranges split at odd places (threads may split anywhere). A target this
// CPU lacks skips by name.
class LinearHwy : public ::testing::TestWithParam<std::tuple<int64_t, DType>> {
 protected:
  void SetUp() override {
    if (!kernels::cpu::hwy_target_supported(std::get<0>(GetParam())))
      GTEST_SKIP() << "this CPU lacks Highway's "
                   << kernels::cpu::hwy_target_name(std::get<0>(GetParam()));
  }
};

TEST_P(LinearHwy, GemvAndGemmMatchReference) {
  const auto [target, dtype] = GetParam();
  const std::pair<kernels::cpu::LinearKernel, const char*> kernels_of_target[] = {
      {kernels::cpu::linear_hwy(target).gemv, "gemv"},
      {kernels::cpu::linear_hwy(target).gemm, "gemm"}};
  for (const Case& c : kCases) {
    for (bool with_bias : {false, true}) {
      const Problem p = make_problem(dtype, c, with_bias);
      const kernels::cpu::LinearArgs args{
          p.x.data(), c.m, c.k, p.w.data, dtype, c.n, with_bias ? p.bias.data() : nullptr, nullptr};
      for (const auto& [kernel, name] : kernels_of_target) {
        for (int64_t split : {c.n / 3, c.n * 2 / 3}) {  // off any grain
          std::vector<float> y(p.expect.size(), std::nanf(""));
          kernels::cpu::LinearArgs a = args;
          a.y = y.data();
          if (split > 0) kernel(a, 0, split);
          kernel(a, split, c.n);
          compare(p, c, y,
                  std::string(name) + " " + kernels::cpu::hwy_target_name(target) +
                      " bias=" + std::to_string(with_bias) + " split=" + std::to_string(split));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Targets, LinearHwy,
    ::testing::Combine(::testing::ValuesIn(kernels::cpu::elementwise_hwy_targets()),
                       ::testing::Values(DType::kF32, DType::kF16, DType::kBF16)),
    [](const auto& p) {
      return std::string(kernels::cpu::hwy_target_name(std::get<0>(p.param))) + "_" +
             dtype_label(std::get<1>(p.param));
    });

// The GEMM on bf16 pair panels (what ops::linear runs at prefill m where the AVX-512 path
// without AMX keeps its weights as pair panels), on every target: several k blocks, panels
// cut by n, 12- and 6-row strips with a tail, the range split where ops::linear splits it,
// on a pair panel (the kernel's contract).
class LinearHwyPairs : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    if (!kernels::cpu::hwy_target_supported(GetParam()))
      GTEST_SKIP() << "this CPU lacks Highway's " << kernels::cpu::hwy_target_name(GetParam());
  }
};

TEST_P(LinearHwyPairs, GemmOnPairPanelsMatchesReference) {
  const int64_t target = GetParam();
  const kernels::cpu::LinearKernel kernel = kernels::cpu::linear_hwy(target).gemm_pairs;
  for (const Case& c :
       {Case{70, 65, 2048}, Case{130, 33, 96}, Case{65, 100, 1100}, Case{1, 1, 3}}) {
    const Problem p = make_problem(DType::kBF16, c, true);
    std::vector<uint16_t> pairs(static_cast<size_t>(kernels::cpu::pair_panel_elems(c.n, c.k)));
    kernels::cpu::pack_bf16_pair_panels(static_cast<const uint16_t*>(p.w.data), c.n, c.k,
                                        pairs.data());
    std::vector<float> y(p.expect.size(), std::nanf(""));
    const kernels::cpu::LinearArgs args{p.x.data(),   c.m, c.k,           pairs.data(),
                                        DType::kBF16, c.n, p.bias.data(), y.data()};
    const int64_t split = std::min(c.n, kernels::cpu::kPanelCols);
    kernel(args, 0, split);
    kernel(args, split, c.n);
    compare(p, c, y, std::string("gemm on pairs ") + kernels::cpu::hwy_target_name(target));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, LinearHwyPairs,
                         ::testing::ValuesIn(kernels::cpu::elementwise_hwy_targets()),
                         [](const ::testing::TestParamInfo<int64_t>& p) {
                           return std::string(kernels::cpu::hwy_target_name(p.param));
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
