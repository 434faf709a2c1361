// Kernel consistency tests for ops::gemm (the GEMM of backpropagation): every ISA this CPU has
// x f32 and bf16 products x awkward shapes x transposed A and B x accumulate x strided operands
// x 1 and 2 threads, against the scalar oracles kernels::ref::gemm_f32 / gemm_bf16; and the
// Highway f32 kernel on every target it is compiled for.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "../common/isa_skip.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/gemm_ref.h"
#include "ops/gemm.h"

namespace qs {
namespace {

using kernels::Isa;

// Same bound as linear_kernels_test: only the summation order differs from the oracle.
constexpr double kRelTolerance = 2e-6;

struct Case {
  int64_t m, n, k;
};

// Sizes below, at and across the register tiles (12/6 rows, 32/16 columns), the 256-deep k
// blocks and the AVX-512 kernel's 192-row blocks (with two threads, a thread's rows start
// inside a block).
const Case kCases[] = {{1, 1, 1},     {1, 17, 3},     {5, 33, 7},     {6, 16, 256}, {7, 15, 257},
                       {8, 32, 300},  {9, 31, 513},   {13, 65, 40},   {33, 7, 600}, {64, 64, 64},
                       {3, 100, 0},   {17, 48, 33},   {40, 130, 90},  {2, 9, 1000}, {12, 32, 256},
                       {192, 33, 20}, {205, 64, 300}, {397, 70, 520}, {24, 1, 777}};

float as_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

// Runs ops::gemm_with_isa(isa), or with hwy_target != 0 the Highway kernel of that target
// directly, each thread with its own scratch.
void check(Isa isa, ops::Products products, const Case& c, bool transposed, bool b_transposed,
           bool accumulate, int64_t pad, int threads, int64_t hwy_target = 0) {
  std::mt19937 rng(static_cast<uint32_t>(c.m * 31 + c.n * 7 + c.k + transposed + 2 * accumulate +
                                         4 * b_transposed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // A stored [m, k + pad] (or [k, m + pad] transposed), B [k, n + pad] (or [n, k + pad]
  // transposed, as W^T is), C [m, n + pad]: the padding columns must be left alone.
  const int64_t a_ld = (transposed ? c.m : c.k) + pad, ldc = c.n + pad;
  const int64_t b_ld = (b_transposed ? c.k : c.n) + pad;
  const int64_t ldb = b_transposed ? 1 : b_ld, b_cs = b_transposed ? b_ld : 1;
  std::vector<float> a((transposed ? c.k : c.m) * a_ld + 1),
      b((b_transposed ? c.n : c.k) * b_ld + 1), c0(c.m * ldc);
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);
  for (float& v : c0) v = normal(rng);
  const kernels::GemmArgs base{a.data(),
                               transposed ? 1 : a_ld,
                               transposed ? a_ld : 1,
                               b.data(),
                               ldb,
                               nullptr,
                               ldc,
                               c.m,
                               c.n,
                               c.k,
                               accumulate,
                               b_cs};
  const bool bf16 = products == ops::Products::kBf16;
  std::vector<float> want = c0, got = c0;
  kernels::GemmArgs g = base;
  g.c = want.data();
  (bf16 ? kernels::ref::gemm_bf16 : kernels::ref::gemm_f32)(g, 0, c.m);
  g.c = got.data();
  ThreadPool pool(threads);
  if (hwy_target != 0) {
    const auto floats = static_cast<size_t>(kernels::cpu::gemm_f32_hwy_scratch_floats(g));
    const kernels::cpu::GemmF32Kernel kernel = kernels::cpu::gemm_f32_hwy(hwy_target);
    pool.parallel_for(
        c.m,
        [&](int64_t begin, int64_t end) {
          std::vector<float> scratch(floats);
          kernel(g, begin, end, scratch.data());
        },
        kernels::cpu::kGemmRowGrain);
  } else {
    ASSERT_TRUE(ops::gemm_with_isa(isa, g, &pool, products).ok());
  }
  const std::string who =
      hwy_target != 0 ? kernels::cpu::hwy_target_name(hwy_target) : kernels::isa_name(isa);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t e = i * ldc + j;
      if (j >= c.n) {
        ASSERT_EQ(got[e], c0[e]) << "padding written at " << i << "," << j;
        continue;
      }
      double mag = accumulate ? std::abs(c0[e]) : 0.0;
      for (int64_t p = 0; p < c.k; ++p) {
        const float av = a[i * base.a_row_stride + p * base.a_col_stride];
        const float bv = b[p * ldb + j * b_cs];
        mag += bf16 ? std::abs(as_bf16(av) * as_bf16(bv)) : std::abs(av * bv);
      }
      ASSERT_NEAR(got[e], want[e], kRelTolerance * (mag + 1e-30) + 1e-30)
          << who << " " << ops::products_name(products) << " m=" << c.m << " n=" << c.n
          << " k=" << c.k << " transposed=" << transposed << " b_transposed=" << b_transposed
          << " accumulate=" << accumulate << " at " << i << "," << j;
    }
  }
}

void check_all(Isa isa, ops::Products products) {
  for (const Case& c : kCases)
    for (const bool transposed : {false, true})
      for (const bool b_transposed : {false, true})
        for (const bool accumulate : {false, true})
          for (const int64_t pad : {int64_t{0}, int64_t{3}})
            for (const int threads : {1, 2})
              check(isa, products, c, transposed, b_transposed, accumulate, pad, threads);
}

TEST(GemmKernels, EveryIsaMatchesReference) {
  for (const Isa isa : testing_util::runnable_isas({Isa::kRef, Isa::kAvx2, Isa::kAvx512}))
    check_all(isa, ops::Products::kF32);
}

// The Highway kernel on every target gemm_hwy.cc is compiled for, called directly (ops::gemm
// runs one target per ISA); a target this CPU lacks skips by name. Fewer shapes than above
// (ragged rows and columns, k across a slice, a thread's rows starting inside a row block): the
// oracle check is slow under sanitizers.
class GemmHwyTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    if (!kernels::cpu::hwy_target_supported(GetParam()))
      GTEST_SKIP() << "this CPU lacks Highway's " << kernels::cpu::hwy_target_name(GetParam());
  }
};

TEST_P(GemmHwyTest, MatchesReference) {
  const Case kHwyCases[] = {{1, 1, 1},    {5, 33, 7},     {3, 100, 0},    {7, 15, 257},
                            {13, 65, 40}, {205, 64, 300}, {397, 70, 520}, {24, 1, 777}};
  for (const Case& c : kHwyCases)
    for (const bool transposed : {false, true})
      for (const bool b_transposed : {false, true})
        for (const bool accumulate : {false, true})
          for (const int threads : {1, 2})
            check(Isa::kRef, ops::Products::kF32, c, transposed, b_transposed, accumulate,
                  int64_t{3}, threads, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Targets, GemmHwyTest,
                         ::testing::ValuesIn(kernels::cpu::elementwise_hwy_targets()),
                         [](const ::testing::TestParamInfo<int64_t>& p) {
                           return std::string(kernels::cpu::hwy_target_name(p.param));
                         });

// The AVX-512 row runs vdpbf16ps where the CPU has AVX512-BF16 and the rounded copies through
// the f32 kernel otherwise (said below); AVX2 always takes the copies.
TEST(GemmKernels, Bf16ProductsMatchReference) {
  for (const Isa isa : testing_util::runnable_isas({Isa::kRef, Isa::kAvx2, Isa::kAvx512})) {
    if (isa == Isa::kAvx512 && !ops::bf16_products_native(isa)) {
      std::cout << "[  NOTE    ] no AVX512-BF16 here: the avx512 bf16 row runs the rounded "
                   "copies, not vdpbf16ps\n";
    }
    check_all(isa, ops::Products::kBf16);
  }
}

// Operands that bf16 cannot hold: the products see them rounded, not as they are.
TEST(GemmKernels, Bf16ProductsRoundTheOperands) {
  ThreadPool pool(1);
  const float x = 1.0f + 1.0f / 512;  // 1 + 2^-9: bf16 keeps 7 fraction bits, so rounds to 1
  std::vector<float> a(64, x), b(64, x), c(1);
  kernels::GemmArgs g = ops::gemm_args(a.data(), false, b.data(), c.data(), 1, 1, 64, false);
  for (const Isa isa : testing_util::runnable_isas({Isa::kRef, Isa::kAvx2, Isa::kAvx512})) {
    ASSERT_TRUE(ops::gemm_with_isa(isa, g, &pool, ops::Products::kBf16).ok());
    EXPECT_EQ(c[0], 64.0f) << kernels::isa_name(isa);
    ASSERT_TRUE(ops::gemm_with_isa(isa, g, &pool, ops::Products::kF32).ok());
    EXPECT_NEAR(c[0], 64.0 * x * x, 1e-4) << kernels::isa_name(isa);
  }
}

TEST(GemmKernels, RejectsBadCalls) {
  ThreadPool pool(1);
  std::vector<float> a(4), b(4), c(4);
  kernels::GemmArgs g = ops::gemm_args(a.data(), false, b.data(), c.data(), 2, 2, 2, false);
  g.ldc = 1;
  EXPECT_FALSE(ops::gemm(g, &pool).ok());
  g = ops::gemm_args(a.data(), false, b.data(), c.data(), -1, 2, 2, false);
  EXPECT_FALSE(ops::gemm(g, &pool).ok());
  g = ops::gemm_args(nullptr, false, b.data(), c.data(), 2, 2, 2, false);
  EXPECT_FALSE(ops::gemm(g, &pool).ok());
}

}  // namespace
}  // namespace qs
