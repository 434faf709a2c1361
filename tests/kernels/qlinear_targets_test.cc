// Kernel tests of the int8-activation quantized linear kernels, every Highway target of
// kernels/cpu/qlinear_*_hwy.cc and the hand-written AVX-512 GEMV, against the scalar code
// they must reproduce: quantize_acts bit for bit, and the GEMV and GEMM == ref::qlinear_int8 (+
// bias) to f32 summation order, over code widths, group sizes, act-order permutations, odd k, row
// counts on both sides of the tiles and column sub-ranges. A target this CPU lacks skips by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "formats/quantized_weight.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/qmatrix.h"
#include "kernels/ref/qlinear_ref.h"
#include "ops/qmatrix_pack.h"

namespace qs {
namespace {

using kernels::QActsView;
using kernels::QMatrixView;

// The kernels and the oracle add the same f32 terms in different orders (per-lane partial
// sums over block pairs, the group scale applied per pair rather than per group), so they
// differ by a few f32 roundings of the terms' magnitude: at most ~(k / 256 + 8) * 2^-24 of
// sum |term| (see term_magnitude). 2e-6 of it sits above that for k <= 1000 yet a single
// wrong code, dropped block or misplaced group moves an output by >= 1e-3 of it.
constexpr double kRelTolerance = 2e-6;

struct AlignedBuffer {
  explicit AlignedBuffer(size_t bytes)
      : data(static_cast<uint8_t*>(
            std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64)))),
        size(bytes) {}
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data;
  size_t size;
};

enum class Zeros { kRandom, kUniformMid, kUniformZero };

// A random QuantizedWeight: codes uniform in [0, 2^bits), scales of both signs, zeros as
// asked (random ones reach 2^bits, as GPTQ v1 checkpoints do), g_idx a random act-order
// permutation of full groups when `act_order`.
formats::QuantizedWeight random_weight(int64_t n, int64_t k, int bits, int64_t group_size,
                                       Zeros zeros, bool act_order, std::mt19937& rng) {
  formats::QuantizedWeight w;
  w.n = n;
  w.k = k;
  w.bits = bits;
  w.group_size = group_size;
  const int64_t n_groups = group_size > 0 ? (k + group_size - 1) / group_size : 1;
  std::uniform_int_distribution<int> code(0, (1 << bits) - 1), zero(0, 1 << bits);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  w.codes.resize(static_cast<size_t>(n * k));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(code(rng));
  w.scales.resize(static_cast<size_t>(n * n_groups));
  for (float& s : w.scales) s = (rng() % 5 == 0 ? -1.0f : 1.0f) * scale(rng);
  w.zeros.resize(w.scales.size());
  for (int32_t& z : w.zeros) {
    z = zeros == Zeros::kRandom ? zero(rng) : zeros == Zeros::kUniformMid ? 1 << (bits - 1) : 0;
  }
  if (act_order) {
    w.g_idx.resize(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) w.g_idx[c] = static_cast<int32_t>(c / group_size);
    std::shuffle(w.g_idx.begin(), w.g_idx.end(), rng);
  }
  return w;
}

struct Case {
  int bits;
  int64_t group_size;  // <= 0: per channel
  int64_t k;
  Zeros zeros;
  bool act_order;
};

std::string describe(const Case& c, int64_t m, int64_t n) {
  return "bits=" + std::to_string(c.bits) + " group=" + std::to_string(c.group_size) +
         " k=" + std::to_string(c.k) + " zeros=" + std::to_string(static_cast<int>(c.zeros)) +
         " act_order=" + std::to_string(c.act_order) + " m=" + std::to_string(m) +
         " n=" + std::to_string(n);
}

// Inputs of several magnitudes per row, one all-zero row (amax 0) and one outlier.
std::vector<float> random_acts(int64_t m, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const float mag = std::pow(10.0f, static_cast<float>(i % 5) - 2.0f);
    for (int64_t c = 0; c < k; ++c) x[i * k + c] = i == 1 ? 0.0f : mag * normal(rng);
  }
  if (m * k > 3) x[3] = 50.0f;
  return x;
}

void expect_same_acts(const QMatrixView& w, const QActsView& want, const QActsView& got,
                      const std::string& what) {
  const int64_t m = want.m, nb = w.blocks();
  ASSERT_EQ(0, std::memcmp(want.q, got.q, static_cast<size_t>(m * w.k_pad))) << "q " << what;
  ASSERT_EQ(0, std::memcmp(want.d, got.d, sizeof(float) * m * nb)) << "d " << what;
  ASSERT_EQ(0, std::memcmp(want.qsum, got.qsum, sizeof(int32_t) * m * nb)) << "qsum " << what;
  ASSERT_EQ(0, std::memcmp(want.gsum, got.gsum, sizeof(float) * m * w.n_groups)) << "gsum " << what;
}

// sum_g |scale| sum_{b in g} d_b sum_t |u q| + |zero_term * gsum| for every output: the size
// of what the f32 sums add, whatever their order. Codes come from the unpacked weight `qw`
// through the repack's permutation.
std::vector<double> term_magnitude(const formats::QuantizedWeight& qw, const QMatrixView& w,
                                   const QActsView& a) {
  const int64_t nb = w.blocks();
  std::vector<double> t(static_cast<size_t>(a.m * w.n), 0.0);
  for (int64_t i = 0; i < a.m; ++i) {
    for (int64_t j = 0; j < w.n; ++j) {
      double sum = 0.0;
      for (int64_t g = 0; g < w.n_groups; ++g) {
        const double s = w.scales[j * w.n_groups + g];
        const double zt =
            w.zero_terms != nullptr ? w.zero_terms[j * w.n_groups + g] : -s * w.uniform_zero;
        sum += std::fabs(zt * a.gsum[i * w.n_groups + g]);
        const int64_t c_end = std::min(w.k, (g + 1) * w.group_size);
        for (int64_t c = g * w.group_size; c < c_end; ++c) {
          const int64_t src = w.perm != nullptr ? w.perm[c] : c;
          sum += std::fabs(s * a.d[i * nb + c / kernels::kQBlock] * qw.codes[j * qw.k + src] *
                           a.q[i * a.k_pad + c]);
        }
      }
      t[i * w.n + j] = sum;
    }
  }
  return t;
}

using Kernel = void (*)(const kernels::cpu::QLinearArgs&, int64_t, int64_t);

// Runs `kernel` on columns [n_begin, n_end) of a NaN-filled y and checks those against
// `expect` (within kRelTolerance of `magnitude`) and every other column untouched.
void check_kernel(Kernel kernel, const char* name, const QMatrixView& w, const QActsView& a,
                  const float* bias, int64_t n_begin, int64_t n_end,
                  const std::vector<float>& expect, const std::vector<double>& magnitude,
                  const std::string& what) {
  const int64_t m = a.m, n = w.n;
  std::vector<float> y(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
  const kernels::cpu::QLinearArgs args{&w, &a, bias, y.data()};
  kernel(args, n_begin, n_end);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float got = y[i * n + j];
      if (j < n_begin || j >= n_end) {
        ASSERT_TRUE(std::isnan(got)) << name << " wrote column " << j << " outside [" << n_begin
                                     << ", " << n_end << ") " << what;
        continue;
      }
      ASSERT_LE(std::fabs(static_cast<double>(got) - expect[i * n + j]),
                kRelTolerance * magnitude[i * n + j])
          << name << " at [" << i << ", " << j << "] got " << got << " want " << expect[i * n + j]
          << " (term magnitude " << magnitude[i * n + j] << ") " << what;
    }
  }
}

// One set of kernels under test: a Highway target's, or a hand-written GEMV.
struct Variant {
  std::string name;
  bool supported;
  kernels::cpu::QLinearKernels k;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  for (int64_t t : kernels::cpu::elementwise_hwy_targets()) {
    v.push_back({kernels::cpu::hwy_target_name(t), kernels::cpu::hwy_target_supported(t),
                 kernels::cpu::qlinear_hwy(t)});
  }
#if QS_X86
  // The hand-written GEMV, the only hand-written int8-activation kernel left (null: none of
  // its own).
  v.push_back({"hand_avx512",
               kernels::isa_supported(kernels::Isa::kAvx512),
               {kernels::cpu::qlinear_gemv_avx512, nullptr, nullptr}});
#endif
  return v;
}

void run_case(const Variant& v, const Case& c, int64_t m, int64_t n, std::mt19937& rng) {
  const std::string what = describe(c, m, n);
  const formats::QuantizedWeight qw =
      random_weight(n, c.k, c.bits, c.group_size, c.zeros, c.act_order, rng);
  ASSERT_EQ(ops::qmatrix_unsupported(qw), "") << what;
  AlignedBuffer wbuf(ops::qmatrix_bytes(qw));
  const QMatrixView w = ops::qmatrix_pack(qw, wbuf.data);
  ASSERT_EQ(w.perm != nullptr, c.act_order) << what;

  const std::vector<float> x = random_acts(m, c.k, rng);
  AlignedBuffer scalar_buf(kernels::qacts_bytes(w, m)), simd_buf(kernels::qacts_bytes(w, m));
  const QActsView a = kernels::quantize_acts(w, x.data(), m, scalar_buf.data);
  if (v.k.quantize_acts != nullptr) {
    const QActsView a2 = v.k.quantize_acts(w, x.data(), m, simd_buf.data);
    expect_same_acts(w, a, a2, v.name + " " + what);
  }

  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> bias(static_cast<size_t>(n));
  for (float& b : bias) b = normal(rng);
  std::vector<float> expect(static_cast<size_t>(m * n));
  kernels::ref::qlinear_int8(w, a, 0, n, expect.data());
  std::vector<float> expect_bias = expect;
  const std::vector<double> magnitude = term_magnitude(qw, w, a);
  std::vector<double> magnitude_bias = magnitude;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      expect_bias[i * n + j] += bias[j];
      magnitude_bias[i * n + j] += std::fabs(bias[j]);
    }
  }

  // The whole range without bias, and with bias a range that starts and ends mid-tile.
  const int64_t sub_begin = std::min<int64_t>(1, n - 1), sub_end = std::max(n - 2, sub_begin + 1);
  for (auto [kernel, name] :
       {std::pair<Kernel, std::string>{v.k.gemv, v.name + " gemv"}, {v.k.gemm, v.name + " gemm"}}) {
    if (kernel == nullptr) continue;
    check_kernel(kernel, name.c_str(), w, a, nullptr, 0, n, expect, magnitude, what);
    check_kernel(kernel, name.c_str(), w, a, bias.data(), sub_begin, sub_end, expect_bias,
                 magnitude_bias, what);
  }
}

class QLinearTargetTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    if (!GetParam().supported) GTEST_SKIP() << "this CPU lacks " << GetParam().name;
  }
};

// bits {2, 3, 4, 8} x groups {32, 64, 128, per channel} x zeros x act order, on k = 96 (three
// blocks: an odd block count, a partial last group for 64, one group for 128) and k = 1000
// (a partial last block), over m {1, 3, 16, 64} x n {1, 7, 64, 200}.
TEST_P(QLinearTargetTest, MatchesScalarOracle) {
  std::mt19937 rng(1234);
  int cases = 0;
  for (int bits : {2, 3, 4, 8}) {
    for (int64_t group : {int64_t{32}, int64_t{64}, int64_t{128}, int64_t{-1}}) {
      for (int64_t k : {int64_t{96}, int64_t{1000}}) {
        for (Zeros zeros : {Zeros::kRandom, Zeros::kUniformMid, Zeros::kUniformZero}) {
          for (bool act_order : {false, true}) {
            // Act order needs several groups to permute.
            if (act_order && (group <= 0 || group >= k)) continue;
            for (int64_t m : {1, 3, 16, 64}) {
              for (int64_t n : {1, 7, 64, 200}) {
                // The largest shapes once per width and group: they add time, not paths.
                if (k == 1000 && m * n > 64 * 7 && zeros != Zeros::kRandom) continue;
                run_case(GetParam(), {bits, group, k, zeros, act_order}, m, n, rng);
                if (HasFatalFailure()) return;
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 500);
}

// Long columns (several of the GEMM's 16-block panel chunks) for every target.
TEST_P(QLinearTargetTest, LongColumnsMatchScalarOracle) {
  std::mt19937 rng(99);
  for (int bits : {4, 8}) {
    for (int64_t m : {1, 5}) {
      run_case(GetParam(), {bits, 128, 16400, Zeros::kRandom, false}, m, 9, rng);
      if (HasFatalFailure()) return;
    }
  }
}

// quantize_acts on inputs that stress its rounding and bytes: exact .5 ties of x * id,
// infinities and NaN (whose products are not numbers), tiny blocks whose 127 / amax overflows.
TEST_P(QLinearTargetTest, QuantizeActsEdgeValuesBitExact) {
  if (GetParam().k.quantize_acts == nullptr) GTEST_SKIP() << GetParam().name << " has none";
  std::mt19937 rng(7);
  formats::QuantizedWeight qw = random_weight(4, 160, 4, 32, Zeros::kRandom, false, rng);
  AlignedBuffer wbuf(ops::qmatrix_bytes(qw));
  const QMatrixView w = ops::qmatrix_pack(qw, wbuf.data);
  const int64_t m = 3;
  std::vector<float> x(static_cast<size_t>(m * w.k));
  for (int64_t c = 0; c < w.k; ++c) {
    x[c] = static_cast<float>(c % 32) - 15.5f;
    x[w.k + c] = 1e-38f * static_cast<float>(c % 7);
    x[2 * w.k + c] = static_cast<float>(c) * 0.25f - 20.0f;
  }
  // Block 0: amax 127, so id = 1 and every other input is a half-way tie.
  x[0] = 127.0f;
  x[2 * w.k + 40] = std::numeric_limits<float>::infinity();
  x[2 * w.k + 70] = std::numeric_limits<float>::quiet_NaN();
  x[2 * w.k + 100] = -std::numeric_limits<float>::infinity();
  AlignedBuffer scalar_buf(kernels::qacts_bytes(w, m)), simd_buf(kernels::qacts_bytes(w, m));
  const QActsView a = kernels::quantize_acts(w, x.data(), m, scalar_buf.data);
  const QActsView a2 = GetParam().k.quantize_acts(w, x.data(), m, simd_buf.data);
  expect_same_acts(w, a, a2, GetParam().name + " edge values");
}

INSTANTIATE_TEST_SUITE_P(Kernels, QLinearTargetTest, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& p) { return p.param.name; });

}  // namespace
}  // namespace qs
