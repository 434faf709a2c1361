// Kernel tests for W8A8 and fp8 weights: fp8 e4m3 codes stay one byte resident and run on the
// bf16-activation kernels, and declared activation quantization (fp8 or int8; dynamic per
// token, per group or static per tensor; int8 symmetric or with a zero point) gives what the
// same grid computes in f64: the activation of vLLM's kernels, x_hat = s * q, times the
// dequantized weight. The reference here is written from that definition alone (not from the
// kernels' code), for every ISA this CPU has and the scalar one, and for the int kernels of
// every Highway target this CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../common/isa_skip.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/qmatrix.h"
#include "kernels/ref/qlinear_bf16act_ref.h"
#include "ops/linear.h"
#include "ops/quant_matrix.h"

namespace qs {
namespace {

using formats::ActScheme;
using formats::ActStrategy;
using formats::ActType;
using formats::QuantizedWeight;
using formats::QuantScheme;

QuantizedWeight fp8_weight(int64_t n, int64_t k, int64_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedWeight w;
  w.n = n;
  w.k = k;
  w.bits = 8;
  w.code_type = formats::CodeType::kFp8E4m3;
  w.group_size = group;
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.004f);
  w.codes.resize(static_cast<size_t>(n * k));
  for (uint8_t& c : w.codes) {
    do c = static_cast<uint8_t>(code(rng));
    while ((c & 0x7F) == 0x7F);  // the NaN codes
  }
  w.scales.resize(static_cast<size_t>(n * w.n_groups()));
  for (float& s : w.scales) s = scale(rng);
  w.zeros.assign(w.scales.size(), 0);
  return w;
}

QuantizedWeight int8_weight(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedWeight w;
  w.n = n;
  w.k = k;
  w.bits = 8;
  w.group_size = k;
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> scale(0.0005f, 0.002f);
  w.codes.resize(static_cast<size_t>(n * k));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(code(rng));
  w.scales.resize(static_cast<size_t>(n));
  for (float& s : w.scales) s = scale(rng);
  w.zeros.assign(w.scales.size(), 128);
  return w;
}

std::vector<float> random_x(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const float row = std::exp(normal(rng));
    for (int64_t c = 0; c < k; ++c) x[i * k + c] = normal(rng) * row * (c % 37 == 5 ? 12 : 1);
  }
  return x;
}

// x as the declared scheme rounds it (or bf16(x) when none is declared), row by row.
std::vector<double> act_grid(const ActScheme& act, float static_scale, int32_t static_zero,
                             const std::vector<float>& x, int64_t m, int64_t k) {
  std::vector<double> out(x.size());
  const int64_t span = act.strategy == ActStrategy::kGroup ? act.group_size : k;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c0 = 0; c0 < k; c0 += span) {
      const int64_t c1 = std::min(k, c0 + span);
      float lo = 0, hi = 0, amax = 0;
      for (int64_t c = c0; c < c1; ++c) {
        const float v = x[i * k + c];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        amax = std::max(amax, std::fabs(v));
      }
      float s = static_scale;
      int32_t z = static_zero;
      if (act.dynamic && act.type == ActType::kFp8) s = std::max(amax / 448.0f, 1.0f / 229376.0f);
      if (act.dynamic && act.type == ActType::kInt8 && act.sym) s = amax / 127.0f;
      if (act.dynamic && act.type == ActType::kInt8 && !act.sym) {
        s = (hi - lo) / 255.0f;
        z = static_cast<int32_t>(std::nearbyint(-128.0f - lo / s));
      }
      for (int64_t c = c0; c < c1; ++c) {
        const float v = x[i * k + c];
        double g;
        if (act.type == ActType::kNone) {
          g = kernels::bf16_to_f32(kernels::f32_to_bf16(v));
        } else if (act.type == ActType::kFp8) {
          g = static_cast<double>(s) * fp8_e4m3_to_f32(f32_to_fp8_e4m3(v / s));
        } else {
          const float q =
              std::clamp(std::nearbyint(v / s) + static_cast<float>(z), -128.0f, 127.0f);
          g = static_cast<double>(s) * (q - static_cast<float>(z));
        }
        out[i * k + c] = g;
      }
    }
  }
  return out;
}

struct Case {
  std::string name;
  bool fp8_codes;
  int64_t weight_group;  // fp8: columns per scale (k = per channel)
  ActScheme act;
  float static_scale = 1.0f;
  int32_t static_zero = 0;
  // Extra relative error allowed beyond float summation: activation groups that do not line
  // up with the weight's fold the scale into bf16 (2^-9).
  double extra = 0.0;
  int64_t k = 384;  // 12 blocks; 416 = 13 leaves the fp8 decoder's last block unpaired
};

ActScheme act(ActType type, ActStrategy strategy, bool dynamic, bool sym = true,
              int64_t group = 0) {
  ActScheme a;
  a.type = type;
  a.strategy = strategy;
  a.dynamic = dynamic;
  a.sym = sym;
  a.group_size = group;
  return a;
}

class W8A8 : public ::testing::TestWithParam<Case> {};

TEST_P(W8A8, OpsLinearComputesTheDeclaredGrid) {
  const Case& cs = GetParam();
  // 70 columns: a thread's share is not a multiple of the decode tiles' 2 or 4 columns.
  const int64_t n = 70, k = cs.k;
  const QuantizedWeight qw =
      cs.fp8_codes ? fp8_weight(n, k, cs.weight_group, 5) : int8_weight(n, k, 5);
  QuantScheme scheme;
  scheme.layout = cs.fp8_codes ? formats::Layout::kFp8 : formats::Layout::kCtInt;
  scheme.bits = 8;
  scheme.group_size = cs.fp8_codes && cs.weight_group < k ? cs.weight_group : -1;
  scheme.act = cs.act;
  auto made = ops::QuantMatrix::make(scheme, qw, cs.static_scale, cs.static_zero);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const ops::LinearWeight lw(*made);
  ASSERT_TRUE((*made)->packed()) << lw.kernel();
  if (cs.fp8_codes && cs.weight_group >= 128) {
    // One byte per weight plus f32 scales: at most 0.55x the bf16 weight.
    EXPECT_LE(lw.resident_bytes(), static_cast<size_t>(0.55 * 2.0 * n * k));
    EXPECT_NE(lw.kernel().find("fp8 e4m3 (1 byte)"), std::string::npos) << lw.kernel();
  }
  std::vector<float> wdeq(static_cast<size_t>(n * k));
  formats::dequantize(qw, wdeq.data());
  ThreadPool pool(2);
  std::vector<kernels::Isa> isas = {kernels::Isa::kRef};
  if (kernels::active_isa() != kernels::Isa::kRef) isas.push_back(kernels::active_isa());
  for (int64_t m : {1, 2, 3, 4, 5, 40}) {
    const std::vector<float> x = random_x(m, k, 17 + static_cast<uint32_t>(m));
    const std::vector<double> xg = act_grid(cs.act, cs.static_scale, cs.static_zero, x, m, k);
    for (kernels::Isa isa : isas) {
      std::vector<float> y(static_cast<size_t>(m * n), NAN);
      ASSERT_TRUE(ops::linear_with_isa(isa, x.data(), m, lw, nullptr, y.data(), pool).ok());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double want = 0, mag = 0;
          for (int64_t c = 0; c < k; ++c) {
            want += wdeq[j * k + c] * xg[i * k + c];
            mag += std::fabs(wdeq[j * k + c] * x[i * k + c]);
          }
          const double tol = (2e-6 + cs.extra) * mag + 1e-9;
          ASSERT_NEAR(y[i * n + j], want, tol) << cs.name << " isa " << kernels::isa_name(isa)
                                               << " m=" << m << " [" << i << ", " << j << "]";
        }
      }
    }
  }
}

// Declared symmetric int8 activations (q can reach -128 with a static scale) on the int kernels
// of every Highway target, called directly (ops::linear runs one target per ISA), against the
// same f64 grid. A target this CPU lacks is named as not run.
class W8A8IntKernels : public ::testing::TestWithParam<Case> {};

TEST_P(W8A8IntKernels, EveryHighwayTargetComputesTheDeclaredGrid) {
  const Case& cs = GetParam();
  const int64_t n = 70, k = cs.k;
  const QuantizedWeight qw = int8_weight(n, k, 5);
  QuantScheme scheme;
  scheme.layout = formats::Layout::kCtInt;
  scheme.bits = 8;
  scheme.group_size = -1;
  scheme.act = cs.act;
  auto made = ops::QuantMatrix::make(scheme, qw, cs.static_scale, cs.static_zero);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const ops::QuantMatrix& q = **made;
  ASSERT_TRUE(q.packed() && !q.needs_bf16_kernels());
  std::vector<float> wdeq(static_cast<size_t>(n * k));
  formats::dequantize(qw, wdeq.data());
  for (int64_t target : kernels::cpu::elementwise_hwy_targets()) {
    const std::string name = kernels::cpu::hwy_target_name(target);
    if (!kernels::cpu::hwy_target_supported(target)) {
      testing_util::note_isa_skip("Highway's " + name);
      continue;
    }
    const kernels::cpu::QLinearKernels& kern = kernels::cpu::qlinear_hwy(target);
    for (int64_t m : {1, 3, 40}) {
      const std::vector<float> x = random_x(m, k, 17 + static_cast<uint32_t>(m));
      const std::vector<double> xg = act_grid(cs.act, cs.static_scale, cs.static_zero, x, m, k);
      std::unique_ptr<void, decltype(&std::free)> buf(
          std::aligned_alloc(64, (kernels::qacts_bytes(q.view(), m) + 63) / 64 * 64), &std::free);
      const kernels::QActsView a = kernels::quantize_acts_declared(
          q.view(), q.act_quant(), q.input_scale(), x.data(), m, buf.get());
      for (bool gemm : {false, true}) {
        std::vector<float> y(static_cast<size_t>(m * n), NAN);
        (gemm ? kern.gemm : kern.gemv)({&q.view(), &a, nullptr, y.data()}, 0, n);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double want = 0, mag = 0;
            for (int64_t c = 0; c < k; ++c) {
              want += wdeq[j * k + c] * xg[i * k + c];
              mag += std::fabs(wdeq[j * k + c] * x[i * k + c]);
            }
            ASSERT_NEAR(y[i * n + j], want, (2e-6 + cs.extra) * mag + 1e-9)
                << cs.name << " " << name << (gemm ? " gemm" : " gemv") << " m=" << m << " [" << i
                << ", " << j << "]";
          }
        }
      }
    }
  }
}

constexpr double kFold = 1.0 / 512;

INSTANTIATE_TEST_SUITE_P(
    Schemes, W8A8,
    ::testing::Values(
        Case{"fp8_weight_only_channel", true, 384, ActScheme{}},
        Case{"fp8_weight_only_block", true, 128, ActScheme{}},
        Case{"fp8_weight_only_odd_blocks", true, 416, ActScheme{}, 1.0f, 0, 0.0, 416},
        Case{"fp8_g32_unpaired", true, 32, ActScheme{}},
        Case{"fp8_dynamic_token", true, 384, act(ActType::kFp8, ActStrategy::kToken, true)},
        Case{"fp8_static_tensor", true, 384, act(ActType::kFp8, ActStrategy::kTensor, false),
             0.02f},
        Case{"fp8_block_group128", true, 128,
             act(ActType::kFp8, ActStrategy::kGroup, true, true, 128)},
        Case{"fp8_channel_group128_folded", true, 384,
             act(ActType::kFp8, ActStrategy::kGroup, true, true, 128), 1.0f, 0, kFold},
        Case{"int8_dynamic_token", false, 384, act(ActType::kInt8, ActStrategy::kToken, true)},
        Case{"int8_static_tensor", false, 384, act(ActType::kInt8, ActStrategy::kTensor, false),
             0.05f},
        Case{"int8_dynamic_group64", false, 384,
             act(ActType::kInt8, ActStrategy::kGroup, true, true, 64)},
        Case{"int8_dynamic_token_asym", false, 384,
             act(ActType::kInt8, ActStrategy::kToken, true, false)},
        Case{"int8_static_tensor_asym", false, 384,
             act(ActType::kInt8, ActStrategy::kTensor, false, false), 0.04f, -9}),
    [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

// The declared schemes that run the int kernels (int8 symmetric); the others run the
// bf16-activation kernels.
INSTANTIATE_TEST_SUITE_P(
    Schemes, W8A8IntKernels,
    ::testing::Values(Case{"int8_dynamic_token", false, 384,
                           act(ActType::kInt8, ActStrategy::kToken, true)},
                      Case{"int8_static_tensor", false, 384,
                           act(ActType::kInt8, ActStrategy::kTensor, false), 0.05f},
                      Case{"int8_dynamic_group64", false, 384,
                           act(ActType::kInt8, ActStrategy::kGroup, true, true, 64)}),
    [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

TEST(W8A8, BadStaticScalesAndUnsupportedPairsAreErrors) {
  const QuantizedWeight f = fp8_weight(32, 64, 64, 1);
  QuantScheme s;
  s.layout = formats::Layout::kFp8;
  s.bits = 8;
  s.act = act(ActType::kFp8, ActStrategy::kTensor, false);
  EXPECT_FALSE(ops::QuantMatrix::make(s, f, 0.0f).ok());
  EXPECT_FALSE(ops::QuantMatrix::make(s, f, NAN).ok());
  s.act = act(ActType::kInt8, ActStrategy::kToken, true);
  const auto r = ops::QuantMatrix::make(s, f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fp8 weights with int8 activations"), std::string::npos);
  const QuantizedWeight q = int8_weight(32, 64, 1);
  s.layout = formats::Layout::kCtInt;
  s.act = act(ActType::kInt8, ActStrategy::kTensor, false, false);
  EXPECT_FALSE(ops::QuantMatrix::make(s, q, 0.1f, 300).ok());
}

}  // namespace
}  // namespace qs
