// Kernel consistency tests for the per-token ops: the Highway kernels on every target they are
// compiled for (called directly, so each target this CPU has runs) against the scalar oracles in
// kernels/ref/elementwise_ref.h (and activation_ref.h for GELU), at lengths around the vector
// widths, with the aliasing the ops allow, and with extreme inputs for the polynomial exp().
// Tolerances per op below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/activation_ref.h"
#include "kernels/ref/elementwise_ref.h"
#include "ops/elementwise.h"

namespace qs {
namespace {

using kernels::Isa;

// The ops compiled for one Highway target.
struct Variant {
  std::string name;
  int64_t hwy_target;
  kernels::cpu::ElementwiseKernels ops;
};

// gtest names a failing case by this instead of the struct's bytes.
void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.name;
}

// Every target elementwise_hwy.cc is compiled for, whether or not this CPU has it: those it
// lacks skip by name.
std::vector<Variant> variants() {
  std::vector<Variant> all;
  for (int64_t target : kernels::cpu::elementwise_hwy_targets()) {
    all.push_back(
        {kernels::cpu::hwy_target_name(target), target, kernels::cpu::elementwise_hwy(target)});
  }
  return all;
}

// Lengths below, at and around the 8- and 16-lane widths, and model sizes.
const int64_t kLengths[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 896, 4097};

std::vector<float> random_vector(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

class ElementwiseTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    if (!kernels::cpu::hwy_target_supported(GetParam().hwy_target))
      GTEST_SKIP() << "this CPU lacks Highway's " << GetParam().name;
  }
  const kernels::cpu::ElementwiseKernels& ops() const { return GetParam().ops; }
};

// f32 lane sums of squares vs the oracle's double sum: relative error ~d * 2^-24 at worst.
TEST_P(ElementwiseTest, RmsNorm) {
  for (int64_t d : kLengths) {
    const int64_t m = 3;
    const std::vector<float> x = random_vector(m * d, static_cast<uint32_t>(d), 2.0f);
    const std::vector<float> w = random_vector(d, static_cast<uint32_t>(d + 1), 1.0f);
    std::vector<float> want(x.size()), got(x.size(), NAN);
    kernels::ref::rms_norm(x.data(), m, d, w.data(), 1e-6f, want.data());
    ops().rms_norm(x.data(), m, d, w.data(), 1e-6f, got.data());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-7) << "d=" << d << " i=" << i;
    // In place (y aliases x), as the model calls it.
    std::vector<float> inplace = x;
    ops().rms_norm(inplace.data(), m, d, w.data(), 1e-6f, inplace.data());
    EXPECT_EQ(inplace, got) << "d=" << d;
  }
}

// exp() to a few ulp: relative 2e-6, plus an absolute floor for results that underflow.
TEST_P(ElementwiseTest, SiluMul) {
  for (int64_t n : kLengths) {
    std::vector<float> g = random_vector(n, static_cast<uint32_t>(n), 4.0f);
    const std::vector<float> up = random_vector(n, static_cast<uint32_t>(n + 7), 1.0f);
    const float extremes[] = {-200.0f, -100.0f, -88.5f, -87.5f, -20.0f, 0.0f,
                              20.0f,   87.5f,   88.5f,  100.0f, 200.0f};
    for (size_t i = 0; i < g.size() && i < std::size(extremes); ++i)
      g[i * 3 % g.size()] = extremes[i];
    std::vector<float> want(g.size()), got(g.size(), NAN);
    kernels::ref::silu_mul(g.data(), up.data(), n, want.data());
    ops().silu_mul(g.data(), up.data(), n, got.data());
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 2e-6 * std::fabs(want[i]) + 1e-30)
          << "n=" << n << " g=" << g[i] << " up=" << up[i];
    std::vector<float> aliased = g;  // out aliases gate
    ops().silu_mul(aliased.data(), up.data(), n, aliased.data());
    EXPECT_EQ(aliased, got);
  }
}

TEST_P(ElementwiseTest, SiluPropagatesNan) {
  std::vector<float> g(20, 1.0f), up(20, 1.0f), out(20);
  g[3] = std::numeric_limits<float>::quiet_NaN();
  g[18] = std::numeric_limits<float>::quiet_NaN();
  ops().silu_mul(g.data(), up.data(), 20, out.data());
  EXPECT_TRUE(std::isnan(out[3]));
  EXPECT_TRUE(std::isnan(out[18]));
  EXPECT_FLOAT_EQ(out[0], 1.0f / (1.0f + std::exp(-1.0f)));
}

// Different summation order and a polynomial exp: relative 1e-5 per probability.
TEST_P(ElementwiseTest, Softmax) {
  for (int64_t n : kLengths) {
    std::vector<float> x = random_vector(n, static_cast<uint32_t>(n), 5.0f);
    if (n > 4) x[2] = -std::numeric_limits<float>::infinity();  // a masked-out score
    std::vector<float> want = x, got = x;
    kernels::ref::softmax(want.data(), n);
    ops().softmax(got.data(), n);
    double total = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-30) << "n=" << n << " i=" << i;
      total += got[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
    if (n > 4) {
      EXPECT_LE(got[2], 1e-37f);
    }
  }
}

// exp(x - shift) within the polynomial's few ulp of std::exp, masked scores (-inf) 0 (AVX-512's
// vscalefps) or at most 2^-126 (elsewhere the built exponent, as in softmax), the sum within f32
// lane-summation error, and the same values whether written or only summed.
TEST_P(ElementwiseTest, ExpSub) {
  for (int64_t n : kLengths) {
    std::vector<float> x = random_vector(n, static_cast<uint32_t>(n) + 7, 5.0f);
    if (n > 4) x[3] = -std::numeric_limits<float>::infinity();
    const float shift = 4.0f;
    std::vector<float> want(x.size()), got(x.size(), NAN);
    const float want_sum = kernels::ref::exp_sub(x.data(), n, shift, want.data());
    const float got_sum = ops().exp_sub(x.data(), n, shift, got.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-37) << "n=" << n << " i=" << i;
    }
    if (n > 4) {
      EXPECT_LE(got[3], 1e-37f);
    }
    EXPECT_NEAR(got_sum, want_sum, 1e-5 * want_sum) << "n=" << n;
    EXPECT_EQ(ops().exp_sub(x.data(), n, shift, nullptr), got_sum) << "n=" << n;
  }
}

// The compiler may fuse the SIMD multiply and subtract into one FMA (GCC contracts in C++
// by default), so each output may differ by one rounding of x1 * c or x2 * s.
TEST_P(ElementwiseTest, RopeRotateHalf) {
  for (int64_t head_dim : {2, 6, 16, 34, 64, 128}) {
    const int64_t n_tokens = 5, n_heads = 3, half = head_dim / 2;
    const std::vector<float> x = random_vector(n_tokens * n_heads * head_dim, 1, 1.0f);
    std::vector<float> cos(static_cast<size_t>(n_tokens * half)), sin(cos.size());
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t j = 0; j < half; ++j) {
        const double angle = t * std::pow(10000.0, -2.0 * j / head_dim);
        cos[t * half + j] = static_cast<float>(std::cos(angle));
        sin[t * half + j] = static_cast<float>(std::sin(angle));
      }
    }
    std::vector<float> want = x, got = x;
    kernels::ref::rope_rotate_half(want.data(), n_tokens, n_heads, head_dim, cos.data(),
                                   sin.data());
    ops().rope_rotate_half(got.data(), n_tokens, n_heads, head_dim, cos.data(), sin.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t h = 0; h < n_heads; ++h) {
        for (int64_t j = 0; j < head_dim; ++j) {
          const int64_t base = (t * n_heads + h) * head_dim, jj = j % half;
          // |x1 c| + |x2 s| bounds both products of this output's pair.
          const double scale = std::fabs(x[base + jj] * cos[t * half + jj]) +
                               std::fabs(x[base + jj + half] * sin[t * half + jj]) +
                               std::fabs(x[base + jj + half] * cos[t * half + jj]) +
                               std::fabs(x[base + jj] * sin[t * half + jj]);
          ASSERT_NEAR(got[base + j], want[base + j], 2e-7 * scale)
              << "head_dim=" << head_dim << " t=" << t << " h=" << h << " j=" << j;
        }
      }
    }
  }
}

TEST_P(ElementwiseTest, AddInplace) {
  for (int64_t n : kLengths) {
    const std::vector<float> x = random_vector(n, 3, 1.0f);
    std::vector<float> want = random_vector(n, 4, 1.0f);
    std::vector<float> got = want;
    kernels::ref::add_inplace(want.data(), x.data(), n);
    ops().add_inplace(got.data(), x.data(), n);
    EXPECT_EQ(got, want) << "n=" << n;
  }
}

// The rational erf is within 4.2e-7 of erf; the oracle's libm erff within 3e-8 (f32
// rounding), so GELU agrees to 1.5e-6 over Whisper's range of activations (and to 0.5 |x|
// 4.5e-7 beyond), tails and lengths around the lane widths included.
TEST_P(ElementwiseTest, GeluErf) {
  for (int64_t n : kLengths) {
    const std::vector<float> x = random_vector(n, 11, 4.0f);
    std::vector<float> want = x, got = x;
    kernels::ref::gelu_erf(want.data(), n);
    ops().gelu_erf(got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(got[i], want[i], 1.5e-6f + 1e-7f * std::fabs(x[i])) << "n=" << n << " x=" << x[i];
    }
  }
  // Past the clamp: x (to f32 rounding) on the right, 0 on the left; infinity stays.
  float edges[] = {0.0f, 30.0f, -30.0f, INFINITY};
  ops().gelu_erf(edges, 4);
  EXPECT_EQ(edges[0], 0.0f);
  EXPECT_NEAR(edges[1], 30.0f, 30.0f * 1e-6f);
  EXPECT_NEAR(edges[2], 0.0f, 30.0f * 1e-6f);
  EXPECT_EQ(edges[3], INFINITY);
}

INSTANTIATE_TEST_SUITE_P(Highway, ElementwiseTest, ::testing::ValuesIn(variants()),
                         [](const auto& param_info) { return param_info.param.name; });

// Highway 1.0.3 on x86: the AVX-512 targets (AVX3_DL: Ice Lake and Zen 4 on), AVX2, SSE4 and
// a portable fallback (EMU128, or SCALAR where Highway deems the compiler's EMU128 broken, as
// for GCC before 12.3) are all compiled, so each runs above on a CPU that has it.
TEST(ElementwiseHwy, CompiledForTheX86Targets) {
#if defined(__x86_64__)
  std::vector<std::string> names;
  for (int64_t t : kernels::cpu::elementwise_hwy_targets())
    names.emplace_back(kernels::cpu::hwy_target_name(t));
  const auto has = [&](const char* name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const char* want : {"AVX3_DL", "AVX3", "AVX2", "SSE4"}) EXPECT_TRUE(has(want)) << want;
  EXPECT_TRUE(has("EMU128") || has("SCALAR"));
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

// avx512 runs the best target the CPU has, avx2 the best of AVX2 and below.
TEST(ElementwiseHwy, TargetFollowsTheIsa) {
  const std::vector<int64_t> targets = kernels::cpu::elementwise_hwy_targets();
  int64_t best = 0;
  for (int64_t t : targets) {
    if (best == 0 && kernels::cpu::hwy_target_supported(t)) best = t;
  }
  if (!kernels::isa_supported(Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks avx2";
  EXPECT_EQ(kernels::cpu::hwy_target_name(kernels::cpu::elementwise_hwy_target(Isa::kAvx2)),
            std::string("AVX2"));
  if (!kernels::isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU lacks avx512";
  EXPECT_EQ(kernels::cpu::elementwise_hwy_target(Isa::kAvx512), best);
}

// The ops front end dispatches to whichever ISA is active; it must agree with the oracle.
TEST(ElementwiseOps, FrontEndMatchesReference) {
  const std::vector<float> x = random_vector(2 * 40, 9, 1.0f), w = random_vector(40, 10, 1.0f);
  std::vector<float> want(x.size()), got(x.size());
  kernels::ref::rms_norm(x.data(), 2, 40, w.data(), 1e-5f, want.data());
  ops::rms_norm(x.data(), 2, 40, w.data(), 1e-5f, got.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]));
  std::vector<float> s = x, s_ref = x;
  ops::softmax(s.data(), 80);
  kernels::ref::softmax(s_ref.data(), 80);
  for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(s[i], s_ref[i], 1e-5 * s_ref[i]);
}

}  // namespace
}  // namespace qs
