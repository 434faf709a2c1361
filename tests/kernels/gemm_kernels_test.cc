// Kernel consistency tests for ops::gemm (the f32 GEMM of backpropagation): every ISA this CPU
// has x awkward shapes x transposed A x accumulate x strided operands x 1 and 2 threads,
// against the scalar oracle kernels::ref::gemm_f32.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../common/isa_skip.h"
#include "core/thread_pool.h"
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

void check(Isa isa, const Case& c, bool transposed, bool accumulate, int64_t pad, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(c.m * 31 + c.n * 7 + c.k + transposed + 2 * accumulate));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // A stored [m, k + pad] (or [k, m + pad] transposed), B [k, n + pad], C [m, n + pad]: the
  // padding columns must be left alone.
  const int64_t a_ld = (transposed ? c.m : c.k) + pad, ldb = c.n + pad, ldc = c.n + pad;
  std::vector<float> a((transposed ? c.k : c.m) * a_ld + 1), b(c.k * ldb + 1), c0(c.m * ldc);
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
                               accumulate};
  std::vector<float> want = c0, got = c0;
  kernels::GemmArgs g = base;
  g.c = want.data();
  kernels::ref::gemm_f32(g, 0, c.m);
  g.c = got.data();
  ThreadPool pool(threads);
  ASSERT_TRUE(ops::gemm_with_isa(isa, g, &pool).ok());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t e = i * ldc + j;
      if (j >= c.n) {
        ASSERT_EQ(got[e], c0[e]) << "padding written at " << i << "," << j;
        continue;
      }
      double mag = accumulate ? std::abs(c0[e]) : 0.0;
      for (int64_t p = 0; p < c.k; ++p)
        mag += std::abs(a[i * base.a_row_stride + p * base.a_col_stride] * b[p * ldb + j]);
      ASSERT_NEAR(got[e], want[e], kRelTolerance * (mag + 1e-30) + 1e-30)
          << kernels::isa_name(isa) << " m=" << c.m << " n=" << c.n << " k=" << c.k
          << " transposed=" << transposed << " accumulate=" << accumulate << " at " << i << ","
          << j;
    }
  }
}

TEST(GemmKernels, EveryIsaMatchesReference) {
  for (const Isa isa : testing_util::runnable_isas({Isa::kRef, Isa::kAvx2, Isa::kAvx512})) {
    for (const Case& c : kCases)
      for (const bool transposed : {false, true})
        for (const bool accumulate : {false, true})
          for (const int64_t pad : {int64_t{0}, int64_t{3}})
            for (const int threads : {1, 2}) check(isa, c, transposed, accumulate, pad, threads);
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
