// The bf16 pair-panel linear (kernels/cpu/linear_cpu.h, "Pair panels"): the packed layout
// element by element, the AVX-512 kernel against the scalar oracle with the dense kernels'
// limit |y - y_ref| <= 2e-6 * sum_k |x_k w_k| across the 12-row passes and 32-column panels
// (column ranges split on and inside panels), the prefill GEMM widening the same panels,
// a row's result bit for bit the same whatever rows share its call (what batched decode
// relies on), and ops::linear on a LinearWeight with panels against the same weight without.
// Kernel cases skip, saying so, without AVX-512; the ops case also where AMX is active (the
// panels are not made there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/resident_arena.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/ref/linear_ref.h"
#include "ops/linear.h"

namespace qs {
namespace {

using kernels::cpu::kPanelCols;

struct Case {
  int64_t m, n, k;
};

// m across the 12-row passes (1, 5, 12, 13, 16, 25, 70), n across the 32-column panels
// (1, 7, 31, 32, 33, 70, 100), k from one step to the Qwen2.5 / TinyLlama widths.
const Case kCases[] = {{1, 7, 1},     {5, 32, 3},    {12, 33, 32},   {13, 31, 96},
                       {16, 70, 896}, {25, 100, 64}, {70, 65, 2048}, {1, 1, 4864}};

std::vector<float> activations(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(count));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = normal(rng) * ((i % 53 == 7) ? 30.0f : (i % 11 == 3) ? 1e-3f : 1.0f);
  }
  return x;
}

std::vector<uint16_t> bf16_weights(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<uint16_t> w(static_cast<size_t>(count));
  for (uint16_t& v : w) v = f32_to_bf16(normal(rng));
  return w;
}

// The packed form of w, in 64-byte-aligned memory as the kernel's aligned loads need.
struct Packed {
  std::shared_ptr<uint8_t[]> bytes;
  const uint16_t* get() const { return reinterpret_cast<const uint16_t*>(bytes.get()); }
  uint16_t operator[](size_t i) const { return get()[i]; }
};

Packed pack(const std::vector<uint16_t>& w, int64_t n, int64_t k) {
  const auto elems = static_cast<size_t>(kernels::cpu::pair_panel_elems(n, k));
  Packed p{alloc_resident(elems * 2)};
  auto* out = reinterpret_cast<uint16_t*>(p.bytes.get());
  std::fill(out, out + elems, uint16_t{0xffff});  // padding must be rewritten
  kernels::cpu::pack_bf16_pair_panels(w.data(), n, k, out);
  return p;
}

// y against ref::linear (+ bias) with the dense kernels' limit, 2e-6 * sum_k |x_k w_k| (and
// 1e-6 of the bias).
::testing::AssertionResult matches_oracle(const std::vector<float>& x,
                                          const std::vector<uint16_t>& w, const float* bias,
                                          const std::vector<float>& y, int64_t m, int64_t n,
                                          int64_t k) {
  std::vector<float> ref(static_cast<size_t>(m * n));
  kernels::ref::linear(x.data(), m, k, w.data(), DType::kBF16, n, 0, n, ref.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double mag = 0;
      for (int64_t q = 0; q < k; ++q) {
        mag += std::fabs(double{x[i * k + q]} * bf16_to_f32(w[j * k + q]));
      }
      const float b = bias != nullptr ? bias[j] : 0.0f;
      const size_t e = static_cast<size_t>(i * n + j);
      if (!(std::fabs(double{y[e]} - (ref[e] + b)) <= 2e-6 * mag + 1e-6 * std::fabs(b))) {
        return ::testing::AssertionFailure()
               << "row " << i << " col " << j << ": " << y[e] << " against " << ref[e] + b;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(PairPanels, LayoutPairsColumnDWithColumnDPlus16) {
  const int64_t n = 45, k = 5;  // a full panel and a partial one
  std::mt19937 rng(1);
  const std::vector<uint16_t> w = bf16_weights(n * k, rng);
  const auto p = pack(w, n, k);
  ASSERT_EQ(kernels::cpu::pair_panel_elems(n, k), 64 * k);
  for (int64_t j = 0; j < 64; ++j) {
    const int64_t panel = j / kPanelCols, c = j % kPanelCols;
    const int64_t slot = c < 16 ? 2 * c : 2 * (c - 16) + 1;
    for (int64_t kk = 0; kk < k; ++kk) {
      const uint16_t got = p[static_cast<size_t>((panel * k + kk) * kPanelCols + slot)];
      const uint16_t want = j < n ? w[static_cast<size_t>(j * k + kk)] : uint16_t{0};
      ASSERT_EQ(got, want) << "column " << j << " step " << kk;
    }
  }
}

TEST(PairPanels, KernelMatchesTheF32Oracle) {
  if (!kernels::isa_supported(kernels::Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(3);
  for (const Case& c : kCases) {
    const std::vector<float> x = activations(c.m * c.k, rng);
    const std::vector<uint16_t> w = bf16_weights(c.n * c.k, rng);
    const auto p = pack(w, c.n, c.k);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> bias(static_cast<size_t>(c.n));
    for (float& b : bias) b = normal(rng);
    // Two calls split on a panel boundary, as ops::linear's 32-column grain makes them, then
    // inside panels, as linear_many's 16-column grain over several weights can.
    for (const int64_t at : {kPanelCols, int64_t{16}, int64_t{5}})
      for (bool with_bias : {false, true}) {
        const std::string what = "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                                 " k=" + std::to_string(c.k) + " split " + std::to_string(at) +
                                 (with_bias ? " bias" : "");
        std::vector<float> y(static_cast<size_t>(c.m * c.n), NAN);
        const kernels::cpu::LinearArgs args{
            x.data(), c.m, c.k, p.get(), DType::kBF16, c.n, with_bias ? bias.data() : nullptr,
            y.data()};
        const int64_t split = std::min<int64_t>(c.n, at);
        kernels::cpu::linear_panels_bf16_avx512(args, 0, split);
        kernels::cpu::linear_panels_bf16_avx512(args, split, c.n);
        ASSERT_TRUE(matches_oracle(x, w, args.bias, y, c.m, c.n, c.k)) << what;
      }
  }
}

TEST(PairPanels, PrefillGemmFromPairsMatchesTheF32Oracle) {
  if (!kernels::isa_supported(kernels::Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(4);
  // Several k blocks of the GEMM (k > 1024), partial last panels, 12-row strips and a tail.
  for (const Case& c : {Case{70, 65, 2048}, Case{130, 33, 96}, Case{65, 100, 1100}}) {
    const std::vector<float> x = activations(c.m * c.k, rng);
    const std::vector<uint16_t> w = bf16_weights(c.n * c.k, rng);
    const auto p = pack(w, c.n, c.k);
    std::vector<float> bias(static_cast<size_t>(c.n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& b : bias) b = normal(rng);
    std::vector<float> y(static_cast<size_t>(c.m * c.n), NAN);
    const kernels::cpu::LinearArgs args{x.data(),     c.m, c.k,         p.get(),
                                        DType::kBF16, c.n, bias.data(), y.data()};
    const int64_t split = std::min<int64_t>(c.n, kPanelCols);
    // What ops::linear runs under avx512 (every target: linear_kernels_test's LinearHwyPairs).
    const kernels::cpu::LinearKernel gemm_pairs =
        kernels::cpu::linear_hwy(kernels::cpu::elementwise_hwy_target(kernels::Isa::kAvx512))
            .gemm_pairs;
    gemm_pairs(args, 0, split);
    gemm_pairs(args, split, c.n);
    ASSERT_TRUE(matches_oracle(x, w, bias.data(), y, c.m, c.n, c.k))
        << "m=" << c.m << " n=" << c.n << " k=" << c.k;
  }
}

TEST(PairPanels, ARowDoesNotDependOnTheRowsBesideIt) {
  if (!kernels::isa_supported(kernels::Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  const int64_t m = 29, n = 40, k = 320;  // 12 + 12 + 5 rows: every pass width meets row 0..4
  std::mt19937 rng(5);
  const std::vector<float> x = activations(m * k, rng);
  const std::vector<uint16_t> w = bf16_weights(n * k, rng);
  const auto p = pack(w, n, k);
  std::vector<float> all(static_cast<size_t>(m * n));
  kernels::cpu::linear_panels_bf16_avx512(
      {x.data(), m, k, p.get(), DType::kBF16, n, nullptr, all.data()}, 0, n);
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{7}}) {
    for (int64_t i0 = 0; i0 + rows <= m; i0 += rows) {
      std::vector<float> part(static_cast<size_t>(rows * n));
      kernels::cpu::linear_panels_bf16_avx512(
          {x.data() + i0 * k, rows, k, p.get(), DType::kBF16, n, nullptr, part.data()}, 0, n);
      ASSERT_EQ(std::memcmp(part.data(), all.data() + i0 * n, part.size() * sizeof(float)), 0)
          << rows << " rows from row " << i0;
    }
  }
}

TEST(PairPanels, OpsLinearWithPanelsMatchesTheDenseWeight) {
  const int64_t n = 200, k = 96;
  std::mt19937 rng(7);
  const std::vector<uint16_t> w = bf16_weights(n * k, rng);
  std::vector<float> wf(w.size());
  for (size_t i = 0; i < w.size(); ++i) wf[i] = bf16_to_f32(w[i]);
  const Tensor dense = Tensor::from_f32(DType::kBF16, {n, k}, wf);
  auto with = ops::with_panels(dense);
  ASSERT_TRUE(with.ok()) << with.status().to_string();
  const bool made = with->pair_panels() != nullptr;
  const bool expected = kernels::active_isa() == kernels::Isa::kAvx512 && !kernels::amx_active();
  ASSERT_EQ(made, expected) << "panels are made exactly where the AVX-512 path without AMX runs";
  if (!made) GTEST_SKIP() << "no pair panels on this CPU (no AVX-512, or AMX active)";
  EXPECT_NE(with->kernel().find("pair panels"), std::string::npos) << with->kernel();
  ThreadPool pool(2);
  for (int64_t m : {int64_t{1}, int64_t{16}, int64_t{80}}) {
    const std::vector<float> x = activations(m * k, rng);
    std::vector<float> got(static_cast<size_t>(m * n)), want(got.size());
    ASSERT_TRUE(ops::linear(x.data(), m, *with, nullptr, got.data(), pool).ok());
    ASSERT_TRUE(matches_oracle(x, w, nullptr, got, m, n, k)) << "m=" << m;
    kernels::ref::linear(x.data(), m, k, w.data(), DType::kBF16, n, 0, n, want.data());
    // The scalar path ignores the panels and reads the row-major form.
    std::vector<float> ref_path(got.size());
    ASSERT_TRUE(
        ops::linear_with_isa(kernels::Isa::kRef, x.data(), m, *with, nullptr, ref_path.data(), pool)
            .ok());
    EXPECT_EQ(ref_path, want) << "m=" << m;
  }
}

}  // namespace
}  // namespace qs
