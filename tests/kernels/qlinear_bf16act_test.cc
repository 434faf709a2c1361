// Kernel tests for the bf16-activation quantized linear: the AVX512-BF16 kernel against its
// scalar oracle (same bf16 activations; float rounding only), the oracle against the exact
// f32 reference within the bound bf16 rounding of x allows (and far inside the int8
// kernels' error), and ops::linear switching paths with set_activation_precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../common/isa_skip.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "kernels/cpu/qlinear_bf16act.h"
#include "kernels/qmatrix.h"
#include "kernels/qpanels.h"
#include "kernels/ref/qlinear_bf16act_ref.h"
#include "kernels/ref/qlinear_ref.h"
#include "ops/linear.h"
#include "ops/qmatrix_pack.h"
#include "ops/quant_matrix.h"

namespace qs {
namespace {

using formats::QuantizedWeight;
using kernels::QMatrixView;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;
Buffer aligned_buffer(size_t bytes) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64)));
}

struct Spec {
  int64_t n, k;
  int bits;
  int64_t group;
  bool act_order, sym;
};

QuantizedWeight random_weight(const Spec& s, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedWeight w;
  w.n = s.n;
  w.k = s.k;
  w.bits = s.bits;
  w.group_size = s.group;
  const int levels = 1 << s.bits;
  std::uniform_int_distribution<int> code(0, levels - 1), zero(0, levels);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  w.codes.resize(static_cast<size_t>(s.n * s.k));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(code(rng));
  w.scales.resize(static_cast<size_t>(s.n * w.n_groups()));
  for (float& v : w.scales) v = scale(rng);
  w.zeros.resize(w.scales.size());
  for (int32_t& z : w.zeros) z = s.sym ? levels / 2 : zero(rng);
  if (s.act_order) {
    w.g_idx.resize(static_cast<size_t>(s.k));
    for (int64_t c = 0; c < s.k; ++c) w.g_idx[c] = static_cast<int32_t>(c / s.group);
    std::shuffle(w.g_idx.begin(), w.g_idx.end(), rng);
  }
  return w;
}

std::vector<float> random_x(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const float row_scale = std::exp(normal(rng));
    for (int64_t c = 0; c < k; ++c) x[i * k + c] = normal(rng) * row_scale * (c % 37 == 5 ? 20 : 1);
  }
  return x;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

class Bf16Act : public ::testing::TestWithParam<Spec> {};

TEST_P(Bf16Act, KernelMatchesOracleAndOracleIsNearExact) {
  const Spec s = GetParam();
  const QuantizedWeight qw = random_weight(s, 7);
  ASSERT_EQ(ops::qmatrix_unsupported(qw), "");
  Buffer wbuf = aligned_buffer(ops::qmatrix_bytes(qw));
  const QMatrixView w = ops::qmatrix_pack(qw, wbuf.get());
  const bool simd_runs = kernels::cpu::bf16act_supported();
  if (!simd_runs) testing_util::note_isa_skip("avx512_bf16 + avx512_vbmi (the SIMD kernel)");
  for (int64_t m : {1, 2, 3, 4, 9}) {
    const std::vector<float> x = random_x(m, s.k, 11 + static_cast<uint32_t>(m));
    Buffer abuf = aligned_buffer(kernels::bf16_acts_bytes(w, m));
    const kernels::Bf16ActsView a = kernels::prepare_bf16_acts(w, x.data(), m, abuf.get());
    std::vector<float> bias(s.n);
    for (int64_t j = 0; j < s.n; ++j) bias[j] = 0.01f * static_cast<float>(j % 7);
    std::vector<float> exact(m * s.n), oracle(m * s.n), simd(m * s.n, NAN);
    kernels::ref::qlinear_exact(w, x.data(), m, 0, s.n, exact.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < s.n; ++j) exact[i * s.n + j] += bias[j];
    kernels::ref::qlinear_bf16act(w, a, bias.data(), 0, s.n, oracle.data());
    // bf16 keeps 8 significant bits: each |x| is rounded by at most 2^-9 relative, so
    // |y_bf16 - y| <= 2^-9 * sum_c |w_c x_c|; bound it by max|w| * sum|x| per row.
    for (int64_t i = 0; i < m; ++i) {
      double xsum = 0;
      for (int64_t c = 0; c < s.k; ++c) xsum += std::abs(x[i * s.k + c]);
      // |w| <= max|scale| * 2^bits (codes and zeros below 2^bits + 1).
      const double bound = std::ldexp(1.0, -9) * 0.02 * (1 << s.bits) * xsum;
      for (int64_t j = 0; j < s.n; ++j) {
        ASSERT_LE(std::abs(oracle[i * s.n + j] - exact[i * s.n + j]), bound)
            << "m=" << m << " row " << i << " col " << j;
      }
    }
    if (!simd_runs) continue;  // the oracle's own checks above still ran
    // Column ranges that do not start at 0, as threads split them.
    kernels::cpu::qlinear_bf16act_avx512(w, a, bias.data(), 0, s.n / 2, simd.data());
    kernels::cpu::qlinear_bf16act_avx512(w, a, bias.data(), s.n / 2, s.n, simd.data());
    const float tol = 1e-5f * std::max(1.0f, max_abs(oracle));
    for (size_t t = 0; t < simd.size(); ++t) {
      ASSERT_NEAR(simd[t], oracle[t], tol) << "m=" << m << " at " << t;
    }
  }
}

// The resident panels hold every code where the layout says (qpanels_code), and the panel
// kernel gives the oracle's numbers (float rounding only: the codes minus the uniform zero
// are summed instead of the zero term after) for every row count's tile shape, with column
// ranges split at panel boundaries as threads split them and a last panel cut short.
TEST_P(Bf16Act, PanelsMatchOracle) {
  const Spec s = GetParam();
  const QuantizedWeight qw = random_weight(s, 9);
  Buffer wbuf = aligned_buffer(ops::qmatrix_bytes(qw));
  const QMatrixView w = ops::qmatrix_pack(qw, wbuf.get());
  if (w.bits != 4) {
    EXPECT_FALSE(kernels::qpanels_supported(w));
    return;
  }
  ASSERT_TRUE(kernels::qpanels_supported(w));
  Buffer pbuf = aligned_buffer(kernels::qpanels_bytes(w));
  const kernels::QPanelsView p = kernels::qpanels_pack(w, pbuf.get());
  for (int64_t j = 0; j < s.n; ++j) {
    for (int64_t c = 0; c < s.k; ++c) {
      const int64_t stored = w.perm != nullptr ? std::find(w.perm, w.perm + s.k, c) - w.perm : c;
      ASSERT_EQ(kernels::qpanels_code(p, j, stored), qw.codes[j * s.k + c]) << j << ", " << c;
    }
  }
  const bool simd = kernels::cpu::bf16act_supported();
  if (!simd) testing_util::note_isa_skip("avx512_bf16 (the panel kernel; its scalar twin runs)");
  for (int64_t m : {1, 2, 3, 4, 5, 8, 11}) {
    const std::vector<float> x = random_x(m, s.k, 21 + static_cast<uint32_t>(m));
    Buffer abuf = aligned_buffer(kernels::bf16_acts_bytes(w, m));
    const kernels::Bf16ActsView a = kernels::prepare_bf16_acts(w, x.data(), m, abuf.get());
    std::vector<float> bias(s.n);
    for (int64_t j = 0; j < s.n; ++j) bias[j] = 0.01f * static_cast<float>(j % 5);
    std::vector<float> oracle(m * s.n), panels(m * s.n, NAN);
    kernels::ref::qlinear_bf16act(w, a, bias.data(), 0, s.n, oracle.data());
    const int64_t split = std::min(s.n, kernels::kPanelCols);
    const float tol = 1e-5f * std::max(1.0f, max_abs(oracle));
    // The scalar twin (what runs panels without AVX512-BF16), then the SIMD kernel.
    kernels::ref::qlinear_bf16panels(p, a, bias.data(), 0, s.n, panels.data());
    for (size_t t = 0; t < panels.size(); ++t) {
      ASSERT_NEAR(panels[t], oracle[t], tol) << "scalar, m=" << m << " at " << t;
    }
    if (!simd) continue;
    std::fill(panels.begin(), panels.end(), NAN);
    kernels::cpu::qlinear_bf16panels_avx512(p, a, bias.data(), 0, split, panels.data());
    kernels::cpu::qlinear_bf16panels_avx512(p, a, bias.data(), split, s.n, panels.data());
    for (size_t t = 0; t < panels.size(); ++t) {
      ASSERT_NEAR(panels[t], oracle[t], tol) << "m=" << m << " at " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Bf16Act,
                         ::testing::Values(Spec{48, 128, 4, 128, false, true},
                                           Spec{40, 96, 4, 32, false, false},
                                           Spec{33, 200, 4, 64, false, false},  // partial k
                                           Spec{32, 256, 8, 32, false, true},
                                           Spec{32, 128, 3, 32, true, false},
                                           Spec{16, 192, 2, 64, false, false},
                                           Spec{100, 96, 4, 96, false, true},  // odd panels
                                           Spec{72, 160, 4, 160, false, false}));

TEST(Bf16Act, RoundingIsNearestEven) {
  EXPECT_EQ(kernels::f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(kernels::bf16_to_f32(kernels::f32_to_bf16(1.00390625f)), 1.0f);       // tie -> even
  EXPECT_EQ(kernels::bf16_to_f32(kernels::f32_to_bf16(1.01171875f)), 1.015625f);  // tie -> even
  EXPECT_TRUE(std::isnan(kernels::bf16_to_f32(kernels::f32_to_bf16(NAN))));
}

// ops::linear follows the process-wide setting: bf16 gives the oracle's numbers, int8 the
// int kernels', and the bf16 path is closer to the exact product.
TEST(Bf16Act, OpsLinearFollowsTheSetting) {
  const Spec s{64, 256, 4, 128, false, false};
  const QuantizedWeight qw = random_weight(s, 3);
  formats::QuantScheme scheme;
  scheme.layout = formats::Layout::kGptq;
  scheme.bits = qw.bits;
  scheme.group_size = qw.group_size;
  auto q = ops::QuantMatrix::make(scheme, qw);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  ASSERT_TRUE((*q)->packed());
  const ops::LinearWeight lw(*q);
  const int64_t m = 5;
  const std::vector<float> x = random_x(m, s.k, 5);
  ThreadPool pool(2);
  const ops::ActivationPrecision before = ops::activation_precision();
  std::vector<float> y_int8(m * s.n), y_bf16(m * s.n), exact(m * s.n);
  ops::set_activation_precision(ops::ActivationPrecision::kInt8);
  ASSERT_TRUE(ops::linear(x.data(), m, lw, nullptr, y_int8.data(), pool).ok());
  ops::set_activation_precision(ops::ActivationPrecision::kBf16);
  ASSERT_TRUE(ops::linear(x.data(), m, lw, nullptr, y_bf16.data(), pool).ok());
  ops::set_activation_precision(before);
  Buffer wbuf = aligned_buffer(ops::qmatrix_bytes(qw));
  const QMatrixView w = ops::qmatrix_pack(qw, wbuf.get());
  kernels::ref::qlinear_exact(w, x.data(), m, 0, s.n, exact.data());
  double err_int8 = 0, err_bf16 = 0;
  for (size_t t = 0; t < exact.size(); ++t) {
    err_int8 = std::max(err_int8, static_cast<double>(std::abs(y_int8[t] - exact[t])));
    err_bf16 = std::max(err_bf16, static_cast<double>(std::abs(y_bf16[t] - exact[t])));
  }
  EXPECT_LT(err_bf16, 0.5 * err_int8) << err_bf16 << " vs " << err_int8;
  EXPECT_EQ(ops::parse_activation_precision("bf16"), ops::ActivationPrecision::kBf16);
  EXPECT_FALSE(ops::parse_activation_precision("fp8").has_value());
}

// A weight made while the precision is bf16 keeps its codes as panels only (view().codes
// null, about half the bytes of keeping both) and runs the exact kernels from then on: with the
// precision switched back to int8, and with the ISA forced to the scalar kernels, it gives the
// numbers it gave before (the scalar twin within float rounding).
TEST(Bf16Act, PanelWeightsKeepOneLayoutAndStayExact) {
  if (!kernels::cpu::bf16act_supported()) {
    GTEST_SKIP() << "this CPU lacks AVX512-BF16/VBMI: weights get no panels here";
  }
  const Spec s{72, 256, 4, 64, true, false};
  const QuantizedWeight qw = random_weight(s, 13);
  formats::QuantScheme scheme;
  scheme.layout = formats::Layout::kGptq;
  scheme.bits = qw.bits;
  scheme.group_size = qw.group_size;
  scheme.sym = false;
  const ops::ActivationPrecision before = ops::activation_precision();
  ops::set_activation_precision(ops::ActivationPrecision::kInt8);
  auto plain = ops::QuantMatrix::make(scheme, qw);
  ops::set_activation_precision(ops::ActivationPrecision::kBf16);
  auto with_panels = ops::QuantMatrix::make(scheme, qw);
  ASSERT_TRUE(plain.ok() && with_panels.ok());
  ASSERT_EQ((*plain)->panels(), nullptr);
  ASSERT_NE((*with_panels)->panels(), nullptr);
  EXPECT_EQ((*with_panels)->view().codes, nullptr);
  EXPECT_LT((*with_panels)->resident_bytes(), 1.25 * (*plain)->resident_bytes());
  EXPECT_NE((*with_panels)->kernel().find("panels"), std::string::npos);
  const int64_t m = 3;
  const std::vector<float> x = random_x(m, s.k, 17);
  ThreadPool pool(2);
  const ops::LinearWeight lw_plain(*plain), lw_panels(*with_panels);
  std::vector<float> exact(m * s.n), panels_bf16(m * s.n), panels_int8(m * s.n), scalar(m * s.n);
  ASSERT_TRUE(ops::linear(x.data(), m, lw_plain, nullptr, exact.data(), pool).ok());
  ASSERT_TRUE(ops::linear(x.data(), m, lw_panels, nullptr, panels_bf16.data(), pool).ok());
  ops::set_activation_precision(ops::ActivationPrecision::kInt8);
  ASSERT_TRUE(ops::linear(x.data(), m, lw_panels, nullptr, panels_int8.data(), pool).ok());
  ASSERT_TRUE(
      ops::linear_with_isa(kernels::Isa::kRef, x.data(), m, lw_panels, nullptr, scalar.data(), pool)
          .ok());
  ops::set_activation_precision(before);
  EXPECT_EQ(panels_bf16, panels_int8);
  const float tol = 1e-5f * std::max(1.0f, max_abs(exact));
  for (size_t t = 0; t < exact.size(); ++t) {
    ASSERT_NEAR(panels_bf16[t], exact[t], tol) << t;
    ASSERT_NEAR(scalar[t], exact[t], tol) << t;
  }
}

// The AVX-512 rounding of declared W8A8 activations writes the scalar version's bytes, group
// sums and scales exactly, for every activation scheme and on the values where rounding
// rules differ: e4m3 subnormals and saturation, ties, zeros of either sign, NaN, an all-zero
// row, spans and k that are not multiples of 16.
TEST(Bf16Act, DeclaredActsSimdEqualsScalarBitForBit) {
  if (!kernels::cpu::bf16act_supported()) {
    GTEST_SKIP() << "this CPU lacks AVX512-BF16/VBMI: the SIMD rounding does not run here";
  }
  using formats::ActScheme;
  using formats::ActStrategy;
  using formats::ActType;
  auto scheme = [](ActType t, ActStrategy st, bool dynamic, bool sym, int64_t g) {
    ActScheme a;
    a.type = t;
    a.strategy = st;
    a.dynamic = dynamic;
    a.sym = sym;
    a.group_size = g;
    return a;
  };
  const std::vector<ActScheme> acts = {
      scheme(ActType::kFp8, ActStrategy::kToken, true, true, 0),
      scheme(ActType::kFp8, ActStrategy::kGroup, true, true, 64),
      scheme(ActType::kFp8, ActStrategy::kGroup, true, true, 40),  // not the weight's groups
      scheme(ActType::kFp8, ActStrategy::kTensor, false, true, 0),
      scheme(ActType::kFp8, ActStrategy::kGroup, false, true, 40),  // static, bf16(s * v)
      scheme(ActType::kInt8, ActStrategy::kToken, true, true, 0),
      scheme(ActType::kInt8, ActStrategy::kToken, true, false, 0),
      scheme(ActType::kInt8, ActStrategy::kTensor, false, false, 0),
  };
  for (const Spec& sp : {Spec{16, 200, 8, 64, false, true}, Spec{16, 256, 8, 64, false, true},
                         Spec{16, 72, 4, 32, false, true}}) {
    const QuantizedWeight qw = random_weight(sp, 5);
    Buffer wbuf = aligned_buffer(ops::qmatrix_bytes(qw));
    const QMatrixView w = ops::qmatrix_pack(qw, wbuf.get());
    const int64_t m = 4;
    std::vector<float> x = random_x(m, sp.k, 9);
    // Ties under the static scales 0.125 and 1 + 2^-8: e4m3 mantissa ties 1.0625 and 1.1875,
    // a subnormal tie 2.5 * 2^-9, an int8 tie 2.5, and 1 + 2^-8 itself, whose s * v is a bf16
    // tie.
    const float specials[] = {0.0f,         -0.0f,       NAN,         1e-30f,      -3e-7f,
                              1.5e-3f,      447.9f,      -1e6f,       2.0f,        0.0703125f,
                              0.068359375f, 1e-39f,      1.0625f / 8, 1.1875f / 8, 2.5f / 4096,
                              2.5f / 8,     1.00390625f, -1.00390625f};
    for (size_t t = 0; t < std::size(specials); ++t) x[(t * 7) % (2 * sp.k)] = specials[t];
    std::fill(x.begin() + 2 * sp.k, x.begin() + 3 * sp.k, 0.0f);  // row 2 all zero
    for (const ActScheme& act : acts) {
      for (const float static_scale : {0.0125f, 0.0f, 0.125f, 1.00390625f}) {
        const int32_t static_zero = act.sym ? 0 : 3;
        const size_t bytes = kernels::declared_bf16_acts_bytes(w, m);
        Buffer b0 = aligned_buffer(bytes), b1 = aligned_buffer(bytes);
        std::memset(b0.get(), 0xAB, bytes);
        std::memset(b1.get(), 0xCD, bytes);
        const kernels::Bf16ActsView a0 = kernels::prepare_declared_bf16_acts(
            w, ops::act_quant_of(act), static_scale, static_zero, x.data(), m, b0.get());
        const kernels::Bf16ActsView a1 = kernels::cpu::prepare_declared_bf16_acts_avx512(
            w, ops::act_quant_of(act), static_scale, static_zero, x.data(), m, b1.get());
        const std::string what = act.describe() + " k=" + std::to_string(sp.k) +
                                 " static_scale=" + std::to_string(static_scale);
        ASSERT_EQ(std::memcmp(a0.x, a1.x, m * w.k_pad * 2), 0) << what;
        ASSERT_EQ(std::memcmp(a0.gsum, a1.gsum, m * w.n_groups * 4), 0) << what;
        ASSERT_EQ(std::memcmp(a0.gscale, a1.gscale, m * w.n_groups * 4), 0) << what;
      }
    }
  }
}

}  // namespace
}  // namespace qs
