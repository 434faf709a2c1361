// The AMX bf16 GEMM against the scalar oracle. The kernel splits x into three bf16 terms
// that sum to it exactly, so only the float summation order differs: held to the dense
// kernels' limit |y - y_ref| <= 2e-6 * sum_k |x_k w_k|. Activations span magnitudes
// (outliers 30x, tiny values) so that the mid and lo terms matter: a kernel that kept only
// the bf16 rounding of x misses by ~2^-9 relative and fails. Skipped, saying so, where the
// CPU (or its kernel) has no AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/ref/linear_ref.h"

namespace qs {
namespace {

struct Case {
  int64_t m, n, k;
};

// m across the 16-token tiles and 32-token blocks (1, 5, 16, 17, 33, 100), n across the
// 16-column tiles and 32-column panels (1, 7, 16, 31, 33, 70), k one tile product and many.
const Case kCases[] = {{1, 7, 32},    {5, 16, 96},   {16, 31, 64},   {17, 33, 896},
                       {33, 70, 128}, {100, 1, 256}, {64, 65, 2048}, {130, 37, 320}};

TEST(LinearAmx, Bf16GemmMatchesTheF32Oracle) {
  if (!kernels::amx_supported()) GTEST_SKIP() << "this CPU (or its kernel) has no AMX";
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Case& c : kCases) {
    std::vector<float> x(static_cast<size_t>(c.m * c.k));
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = normal(rng) * ((i % 53 == 7) ? 30.0f : (i % 11 == 3) ? 1e-3f : 1.0f);
    }
    std::vector<uint16_t> w(static_cast<size_t>(c.n * c.k));
    for (uint16_t& v : w) v = f32_to_bf16(normal(rng) * 0.05f);
    std::vector<float> bias(static_cast<size_t>(c.n));
    for (float& b : bias) b = normal(rng);
    for (bool with_bias : {false, true}) {
      const std::string what = "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                               " k=" + std::to_string(c.k) + (with_bias ? " bias" : "");
      kernels::cpu::LinearArgs args{
          x.data(), c.m, c.k, w.data(), DType::kBF16, c.n, with_bias ? bias.data() : nullptr,
          nullptr};
      ASSERT_TRUE(kernels::cpu::linear_amx_bf16_supports(args)) << what;
      std::vector<float> y(static_cast<size_t>(c.m * c.n), NAN);
      args.y = y.data();
      // Two calls split on a 32-column panel, as the thread pool makes them.
      const int64_t split = std::min<int64_t>(c.n, 32);
      kernels::cpu::linear_gemm_amx_bf16(args, 0, split);
      kernels::cpu::linear_gemm_amx_bf16(args, split, c.n);
      std::vector<float> ref(y.size());
      kernels::ref::linear(x.data(), c.m, c.k, w.data(), DType::kBF16, c.n, 0, c.n, ref.data());
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double mag = 0;
          for (int64_t q = 0; q < c.k; ++q) {
            mag += std::fabs(double{x[i * c.k + q]} * bf16_to_f32(w[j * c.k + q]));
          }
          const float b = with_bias ? bias[j] : 0.0f;
          const size_t e = static_cast<size_t>(i * c.n + j);
          ASSERT_NEAR(y[e], ref[e] + b, 2e-6 * mag + 1e-6 * std::fabs(b))
              << what << " at row " << i << " col " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace qs
