// Kernel tests for the quantized linear: the resident repack, int8 activations and every
// int kernel this CPU has (each Highway target of qlinear_*_hwy.cc, GEMV and GEMM, and the
// hand-written AVX-512 and AVX2 GEMVs) against kernels::ref::qlinear_int8, the int8 reference
// against the unquantized-activation one within the bound the activation rounding allows, and
// ops::linear on a QuantMatrix (packed and dequantized fallback). A target the CPU lacks skips by
// name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "formats/quantized_weight.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/qmatrix.h"
#include "kernels/ref/linear_ref.h"
#include "kernels/ref/qlinear_ref.h"
#include "ops/linear.h"
#include "ops/qmatrix_pack.h"
#include "ops/quant_matrix.h"

namespace qs {
namespace {

using formats::QuantizedWeight;
using kernels::Isa;
using kernels::QActsView;
using kernels::QMatrixView;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;

Buffer aligned_buffer(size_t bytes) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64)));
}

struct WeightSpec {
  int64_t n, k;
  int bits;
  int64_t group;  // -1: per channel (canonical group size k)
  bool act_order;
  bool uniform_zero;
};

std::string label(const WeightSpec& s) {
  return "n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         " bits=" + std::to_string(s.bits) + " group=" + std::to_string(s.group) +
         (s.act_order ? " act-order" : "") + (s.uniform_zero ? " sym" : " asym");
}

// Codes uniform over [0, 2^bits); scales of both signs (AutoRound's full-range symmetric
// scales can be negative); zeros uniform over [0, 2^bits] (GPTQ v1 can reach 2^bits) or all
// 2^(bits-1); act-order: the groups of a plain layout assigned to inputs in random order.
QuantizedWeight random_weight(const WeightSpec& s, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedWeight w;
  w.n = s.n;
  w.k = s.k;
  w.bits = s.bits;
  w.group_size = s.group > 0 ? s.group : s.k;
  const int64_t G = w.n_groups();
  const int levels = 1 << s.bits;
  std::uniform_int_distribution<int> code(0, levels - 1), zero(0, levels);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  w.codes.resize(static_cast<size_t>(s.n * s.k));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(code(rng));
  w.scales.resize(static_cast<size_t>(s.n * G));
  for (float& v : w.scales) v = scale(rng);
  w.zeros.resize(static_cast<size_t>(s.n * G));
  for (int32_t& z : w.zeros) z = s.uniform_zero ? levels / 2 : zero(rng);
  if (s.act_order) {
    w.g_idx.resize(static_cast<size_t>(s.k));
    for (int64_t c = 0; c < s.k; ++c) w.g_idx[c] = static_cast<int32_t>(c / w.group_size);
    std::shuffle(w.g_idx.begin(), w.g_idx.end(), rng);
  }
  return w;
}

// Activations of mixed magnitude: each row has its own scale and some blocks are much
// larger than others, so the per-block int8 scales differ.
std::vector<float> random_x(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const float row_scale = std::exp(normal(rng));
    for (int64_t c = 0; c < k; ++c) {
      const float spike = (c % 37 == 5) ? 20.0f : 1.0f;
      x[i * k + c] = normal(rng) * row_scale * spike;
    }
  }
  return x;
}

struct Packed {
  Buffer buf;
  QMatrixView view;
};

Packed pack(const QuantizedWeight& w) {
  EXPECT_EQ(ops::qmatrix_unsupported(w), "");
  Packed p{aligned_buffer(ops::qmatrix_bytes(w)), {}};
  p.view = ops::qmatrix_pack(w, p.buf.get());
  return p;
}

struct Acts {
  Buffer buf;
  QActsView view;
};

// The scalar quantize_acts, or `simd` (a kernel set's) when given.
Acts quantize(const QMatrixView& w, const std::vector<float>& x, int64_t m,
              decltype(kernels::cpu::QLinearKernels::quantize_acts) simd = nullptr) {
  Acts a{aligned_buffer(kernels::qacts_bytes(w, m)), {}};
  a.view = simd != nullptr ? simd(w, x.data(), m, a.buf.get())
                           : kernels::quantize_acts(w, x.data(), m, a.buf.get());
  return a;
}

// The unsigned code of repacked input c of column j, read from the resident layout.
int code_at(const QMatrixView& w, int64_t j, int64_t c) {
  const uint8_t* col = w.codes + static_cast<size_t>(j) * w.code_bytes_per_column();
  if (w.bits == 8) return col[c];
  const uint8_t byte = col[(c / 32) * 16 + (c % 32) % 16];
  return (c % 32) < 16 ? (byte & 0x0F) : (byte >> 4);
}

float zero_term(const QMatrixView& w, int64_t j, int64_t g) {
  const size_t at = static_cast<size_t>(j * w.n_groups + g);
  return w.zero_terms != nullptr ? w.zero_terms[at] : -w.scales[at] * w.uniform_zero;
}

// Sum of the magnitudes of every term qlinear_int8 adds for y[i, j] (each block's
// scale * d * dot and each group's zero term * gsum): float summation in any order is
// within a few ulps of this, while a lost or doubled term moves y by ~1/(terms) of it.
double term_magnitude(const QMatrixView& w, const QActsView& a, int64_t i, int64_t j) {
  const int64_t nb = w.blocks(), bpg = w.group_size / 32;
  double mag = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t dot = 0;
    for (int64_t t = 0; t < 32; ++t)
      dot += code_at(w, j, b * 32 + t) * a.q[i * a.k_pad + b * 32 + t];
    mag += std::fabs(double{w.scales[j * w.n_groups + b / bpg]} * a.d[i * nb + b] *
                     static_cast<double>(dot));
  }
  for (int64_t g = 0; g < w.n_groups; ++g) {
    mag += std::fabs(double{zero_term(w, j, g)} * a.gsum[i * w.n_groups + g]);
  }
  return mag;
}

// Float sums of the same ~k/32 + G terms in another order (and d * scale multiplied before
// or after the dot): relative to the term magnitudes a few 1e-7; 4e-6 leaves room and still
// catches one wrong block out of the 150 of k = 4864 by three orders of magnitude.
constexpr double kOrderTolerance = 4e-6;

using QKernel = void (*)(const kernels::cpu::QLinearArgs&, int64_t, int64_t);

// One set of int kernels under test; a null member is one the set does not have.
struct KernelSet {
  std::string name;
  bool supported;
  kernels::cpu::QLinearKernels k;
};

// Every target the qlinear_*_hwy.cc sources are compiled for, whether or not this CPU has it (those
// it lacks skip by name), and the hand-written AVX-512 GEMV still kept beside them (null: none of
// its own).
std::vector<KernelSet> kernel_sets() {
  std::vector<KernelSet> sets;
  for (int64_t t : kernels::cpu::elementwise_hwy_targets()) {
    sets.push_back({std::string("hwy_") + kernels::cpu::hwy_target_name(t),
                    kernels::cpu::hwy_target_supported(t), kernels::cpu::qlinear_hwy(t)});
  }
#if QS_X86
  sets.push_back({"avx512",
                  kernels::isa_supported(Isa::kAvx512),
                  {kernels::cpu::qlinear_gemv_avx512, nullptr, nullptr}});
#endif
  return sets;
}

class QLinearIntKernels : public ::testing::TestWithParam<KernelSet> {
 protected:
  void SetUp() override {
    if (!GetParam().supported) GTEST_SKIP() << "this CPU lacks " << GetParam().name;
  }
};

struct Shape {
  int64_t m, n, k;
};

// Every listed k (64; 96 = a partial 128-input step; 160 = a lone block after the GEMM's
// four-block unpacks; 896; 4860 = a partial last block and group), n (1, 7, 33, 64, 200: below,
// across and beyond the column tiles) and m (1, 3, 5, 16, 64, 130: both sides of the GEMV/GEMM
// switch and of the row tiles), kept to shapes the scalar reference computes in well under a
// second.
const Shape kShapes[] = {
    {1, 7, 64},     {3, 200, 64},  {16, 1, 96},   {130, 7, 96},   {1, 64, 896}, {64, 200, 896},
    {130, 64, 896}, {3, 64, 4860}, {16, 7, 4860}, {1, 200, 4860}, {5, 33, 160},
};

constexpr int kBits[] = {2, 3, 4, 8};
constexpr int64_t kGroups[] = {32, 64, 128, -1};

template <typename Fn>
void for_each_spec(const Fn& fn) {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    for (int bits : kBits) {
      for (int64_t group : kGroups) {
        for (bool act_order : {false, true}) {
          const bool uniform_zero = (seed % 3) == 0;
          fn(s, WeightSpec{s.n, s.k, bits, group, act_order && group > 0, uniform_zero}, seed++);
        }
      }
    }
  }
}

TEST(QMatrix, PacksEveryWidthAndGroupingTheKernelsRun) {
  for_each_spec([](const Shape&, const WeightSpec& spec, uint32_t seed) {
    const QuantizedWeight w = random_weight(spec, seed);
    ASSERT_EQ(ops::qmatrix_unsupported(w), "") << label(spec);
    const Packed p = pack(w);
    EXPECT_EQ(p.view.bits, spec.bits <= 4 ? 4 : 8);
    EXPECT_EQ(p.view.k_pad % 32, 0);
    EXPECT_EQ(p.view.group_size % 32, 0);
    const bool zeros_equal =
        std::all_of(w.zeros.begin(), w.zeros.end(), [&](int32_t z) { return z == w.zeros[0]; });
    EXPECT_EQ(p.view.zero_terms == nullptr, zeros_equal) << label(spec);
    // The repacked code of input c is the canonical code of input perm[c].
    for (int64_t j = 0; j < w.n; j += std::max<int64_t>(1, w.n / 5)) {
      for (int64_t c = 0; c < w.k; ++c) {
        const int64_t src = p.view.perm != nullptr ? p.view.perm[c] : c;
        ASSERT_EQ(code_at(p.view, j, c), w.codes[j * w.k + src]) << label(spec);
        ASSERT_EQ(w.group_of(src), c / p.view.group_size) << label(spec);
      }
    }
  });
}

TEST(QMatrix, ExplainsWhatTheIntKernelsCannotRun) {
  WeightSpec spec{8, 128, 4, 32, false, true};
  QuantizedWeight w = random_weight(spec, 7);
  w.code_type = formats::CodeType::kFp8E4m3;
  EXPECT_EQ(ops::qmatrix_unsupported(w), "");  // fp8 packs (bf16-activation kernels)
  w.g_idx.assign(128, 0);
  EXPECT_EQ(ops::qmatrix_unsupported(w), "fp8 with a g_idx");
  w = random_weight({8, 128, 4, 16, false, true}, 7);
  EXPECT_EQ(ops::qmatrix_unsupported(w), "group size 16 is not a multiple of 32");
  w = random_weight({8, 128, 4, 32, true, true}, 7);
  std::swap(w.g_idx[0], w.g_idx[1]);  // still equal sizes: runs
  EXPECT_EQ(ops::qmatrix_unsupported(w), "");
  w.g_idx[0] = w.g_idx[0] == 0 ? 1 : 0;  // one group now holds 33 inputs
  EXPECT_EQ(ops::qmatrix_unsupported(w), "act-order groups of unequal sizes");
}

TEST_P(QLinearIntKernels, ActivationQuantizationIsBitIdentical) {
  const auto simd = GetParam().k.quantize_acts;
  if (simd == nullptr) GTEST_SKIP() << GetParam().name << " has no quantize_acts";
  for (const Shape& s : kShapes) {
    for (bool act_order : {false, true}) {
      const WeightSpec spec{4, s.k, 4, 32, act_order, false};
      const QuantizedWeight w = random_weight(spec, 11);
      const Packed p = pack(w);
      const std::vector<float> x = random_x(s.m, s.k, 5);
      const Acts ref = quantize(p.view, x, s.m);
      const Acts got = quantize(p.view, x, s.m, simd);
      const int64_t nb = p.view.blocks();
      const std::string what = GetParam().name + " " + label(spec);
      EXPECT_EQ(std::memcmp(ref.view.q, got.view.q, s.m * p.view.k_pad), 0) << what;
      EXPECT_EQ(std::memcmp(ref.view.d, got.view.d, s.m * nb * 4), 0) << what;
      EXPECT_EQ(std::memcmp(ref.view.qsum, got.view.qsum, s.m * nb * 4), 0) << what;
      EXPECT_EQ(std::memcmp(ref.view.gsum, got.view.gsum, s.m * p.view.n_groups * 4), 0) << what;
    }
  }
}

TEST_P(QLinearIntKernels, MatchTheInt8Reference) {
  const KernelSet& set = GetParam();
  for_each_spec([&](const Shape& s, const WeightSpec& spec, uint32_t seed) {
    const QuantizedWeight w = random_weight(spec, seed);
    const Packed p = pack(w);
    const std::vector<float> x = random_x(s.m, s.k, seed + 1000);
    const Acts a = quantize(p.view, x, s.m);
    std::vector<float> expect(static_cast<size_t>(s.m * s.n));
    kernels::ref::qlinear_int8(p.view, a.view, 0, s.n, expect.data());
    std::vector<double> mag(expect.size());
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) mag[i * s.n + j] = term_magnitude(p.view, a.view, i, j);
    for (bool gemm : {false, true}) {
      const QKernel kernel = gemm ? set.k.gemm : set.k.gemv;
      if (kernel == nullptr) continue;
      std::vector<float> y(expect.size(), NAN);
      const kernels::cpu::QLinearArgs args{&p.view, &a.view, nullptr, y.data()};
      // Two calls over a split of the columns, as the thread pool makes them.
      const int64_t split = s.n / 2;
      kernel(args, 0, split);
      kernel(args, split, s.n);
      for (size_t e = 0; e < y.size(); ++e) {
        ASSERT_NEAR(y[e], expect[e], kOrderTolerance * mag[e] + 1e-30)
            << set.name << (gemm ? " gemm " : " gemv ") << "m=" << s.m << " " << label(spec)
            << " at row " << e / s.n << " col " << e % s.n;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Int, QLinearIntKernels, ::testing::ValuesIn(kernel_sets()),
                         [](const ::testing::TestParamInfo<KernelSet>& p) { return p.param.name; });

// The AMX GEMM against the same oracle and limit, at every m (the ops use it from
// kQAmxMinRows; smaller m still exercises partial tiles), split as the pool splits columns.
TEST(QLinear, AmxGemmMatchesTheInt8Reference) {
  if (!kernels::amx_supported()) GTEST_SKIP() << "this CPU (or its kernel) has no AMX";
  for_each_spec([&](const Shape& s, const WeightSpec& spec, uint32_t seed) {
    const QuantizedWeight w = random_weight(spec, seed);
    const Packed p = pack(w);
    const std::vector<float> x = random_x(s.m, s.k, seed + 1000);
    const Acts a = quantize(p.view, x, s.m);
    std::vector<float> expect(static_cast<size_t>(s.m * s.n));
    kernels::ref::qlinear_int8(p.view, a.view, 0, s.n, expect.data());
    std::vector<float> bias(static_cast<size_t>(s.n));
    for (int64_t j = 0; j < s.n; ++j) bias[j] = 0.01f * static_cast<float>(j % 7) - 0.03f;
    std::vector<float> y(expect.size(), NAN);
    const kernels::cpu::QLinearArgs args{&p.view, &a.view, bias.data(), y.data()};
    // Panels are 32 columns; the pool hands out multiples of 32, the last range ragged.
    const int64_t split = std::min<int64_t>(s.n, 32);
    kernels::cpu::qlinear_gemm_amx(args, 0, split);
    kernels::cpu::qlinear_gemm_amx(args, split, s.n);
    for (size_t e = 0; e < y.size(); ++e) {
      const int64_t i = static_cast<int64_t>(e) / s.n, j = static_cast<int64_t>(e) % s.n;
      const double mag = term_magnitude(p.view, a.view, i, j);
      ASSERT_NEAR(y[e], expect[e] + bias[j], kOrderTolerance * mag + 1e-6f * std::fabs(bias[j]))
          << "amx m=" << s.m << " " << label(spec) << " at row " << i << " col " << j;
    }
  });
}

// int8 activations against unquantized ones. Each input is rounded to the nearest multiple
// of its block's d = max|x| / 127, so |x - d q| <= d / 2 and |y_int8 - y_exact| <=
// sum_c |W[j, c]| d_c / 2. The float formulas (x * (127 / amax), amax / 127) move that by a
// few ulps of 127 (|x - d q| <= d (1/2 + 1e-4)), and the sums themselves add float rounding
// of the order of 1e-6 of sum |W x|.
TEST(QLinear, Int8ActivationErrorStaysWithinTheRoundingBound) {
  for_each_spec([](const Shape& s, const WeightSpec& spec, uint32_t seed) {
    if (s.m * s.n * s.k > 4'000'000) return;  // the bound is per element; smaller shapes do
    const QuantizedWeight w = random_weight(spec, seed);
    const Packed p = pack(w);
    const std::vector<float> x = random_x(s.m, s.k, seed + 2000);
    const Acts a = quantize(p.view, x, s.m);
    std::vector<float> exact(static_cast<size_t>(s.m * s.n)), int8(exact.size());
    kernels::ref::qlinear_exact(p.view, x.data(), s.m, 0, s.n, exact.data());
    kernels::ref::qlinear_int8(p.view, a.view, 0, s.n, int8.data());
    const int64_t nb = p.view.blocks();
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double bound = 0, sum_abs = 0;
        for (int64_t c = 0; c < s.k; ++c) {
          const int64_t g = c / p.view.group_size;
          const double wv = double{p.view.scales[j * p.view.n_groups + g]} * code_at(p.view, j, c) +
                            zero_term(p.view, j, g);
          const double xc = x[i * s.k + (p.view.perm != nullptr ? p.view.perm[c] : c)];
          bound += std::fabs(wv) * a.view.d[i * nb + c / 32] * (0.5 + 1e-4);
          sum_abs += std::fabs(wv * xc);
        }
        const double err = std::fabs(double{int8[i * s.n + j]} - exact[i * s.n + j]);
        ASSERT_LE(err, bound + 1e-6 * sum_abs + 1e-30)
            << "m=" << s.m << " " << label(spec) << " at row " << i << " col " << j;
      }
    }
  });
}

}  // namespace
}  // namespace qs
