// Tests of ops::linear_many (q/k/v and gate/up in one parallel job) against separate
// ops::linear calls: dense, int-packed and fallback weights mixed, packed weights that share
// one activation quantization and ones that cannot (other group size, act-order), decode and
// prefill row counts, 1 and 3 threads. The results must be identical: the same kernels run
// on the same columns, only the split over threads differs. Also alloc_resident, the memory
// the packed weights live in.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/resident_arena.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "ops/linear.h"
#include "ops/quant_matrix.h"

namespace qs {
namespace {

formats::QuantizedWeight random_quant(int64_t n, int64_t k, int bits, int64_t group, uint32_t seed,
                                      bool permuted = false) {
  std::mt19937 rng(seed);
  formats::QuantizedWeight w;
  w.n = n;
  w.k = k;
  w.bits = bits;
  w.group_size = group;
  std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  w.codes.resize(n * k);
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(code(rng));
  w.scales.resize(n * w.n_groups());
  for (float& s : w.scales) s = scale(rng);
  w.zeros.resize(w.scales.size());
  for (int32_t& z : w.zeros) z = code(rng);
  if (permuted) {
    w.g_idx.resize(k);
    for (int64_t c = 0; c < k; ++c) w.g_idx[c] = static_cast<int32_t>(c % w.n_groups());
  }
  return w;
}

ops::LinearWeight packed(const formats::QuantizedWeight& w) {
  formats::QuantScheme scheme;
  scheme.layout = formats::Layout::kGptq;
  scheme.bits = w.bits;
  scheme.group_size = w.group_size;
  scheme.sym = false;
  auto q = ops::QuantMatrix::make(scheme, w);
  EXPECT_TRUE(q.ok()) << q.status().to_string();
  return ops::LinearWeight(*q);
}

std::vector<float> normal(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = d(rng);
  return v;
}

// Under either activation precision; with bf16 the packed weights are made with the exact
// kernel's resident panels (on CPUs with AVX512-BF16), whose decode-sized groups join too.
class LinearMany : public ::testing::TestWithParam<ops::ActivationPrecision> {
 protected:
  void SetUp() override {
    before_ = ops::activation_precision();
    ops::set_activation_precision(GetParam());
  }
  void TearDown() override { ops::set_activation_precision(before_); }
  ops::ActivationPrecision before_ = ops::ActivationPrecision::kInt8;
};

TEST_P(LinearMany, EqualsSeparateCalls) {
  constexpr int64_t k = 256;
  std::vector<ops::LinearWeight> weights;
  weights.push_back(packed(random_quant(200, k, 4, 128, 1)));  // shares the activations
  weights.push_back(packed(random_quant(64, k, 4, 128, 2)));   // with this one
  weights.push_back(packed(random_quant(64, k, 8, 32, 3)));    // other groups: own quantization
  weights.push_back(ops::LinearWeight(Tensor::from_f32(DType::kBF16, {48, k}, normal(48 * k, 4))));
  weights.push_back(packed(random_quant(40, k, 4, 16, 5)));  // group 16: bf16 fallback
  weights.push_back(packed(random_quant(96, k, 4, 64, 6, /*permuted=*/true)));  // act-order
  ASSERT_FALSE(weights[4].quant->packed());
  const std::vector<float> bias = normal(200, 7);

  for (const std::vector<size_t>& group :
       std::vector<std::vector<size_t>>{{0, 1}, {0, 1, 3}, {0, 2}, {3, 4}, {0, 5, 1}, {0}}) {
    for (int64_t m : {1, 3, 16, 70}) {
      for (int threads : {1, 3}) {
        SCOPED_TRACE("weights " + std::to_string(group.size()) + " m " + std::to_string(m) +
                     " threads " + std::to_string(threads));
        ThreadPool pool(threads);
        const std::vector<float> x = normal(m * k, 8 + m);
        std::vector<std::vector<float>> want(group.size()), got(group.size());
        std::vector<ops::LinearOut> outs;
        for (size_t i = 0; i < group.size(); ++i) {
          const ops::LinearWeight& w = weights[group[i]];
          const float* b = i == 0 ? bias.data() : nullptr;
          want[i].assign(m * w.rows(), 0.0f);
          got[i].assign(m * w.rows(), -1.0f);
          ASSERT_TRUE(ops::linear(x.data(), m, w, b, want[i].data(), pool).ok());
          outs.push_back({&w, b, got[i].data()});
        }
        ASSERT_TRUE(ops::linear_many(x.data(), m, outs, pool).ok());
        for (size_t i = 0; i < group.size(); ++i) {
          ASSERT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)))
              << "output " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, LinearMany,
                         ::testing::Values(ops::ActivationPrecision::kInt8,
                                           ops::ActivationPrecision::kBf16),
                         [](const auto& p) {
                           return std::string(ops::activation_precision_name(p.param));
                         });

TEST(ResidentArena, AlignedDistinctAndKeptAlive) {
  std::vector<std::shared_ptr<uint8_t[]>> blocks;
  const std::vector<size_t> sizes = {1, 100, 4096, size_t{3} << 20, 64, size_t{70} << 20, 7};
  for (size_t i = 0; i < sizes.size(); ++i) {
    blocks.push_back(alloc_resident(sizes[i]));
    ASSERT_NE(blocks.back(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks.back().get()) % 64, 0u);
    std::memset(blocks.back().get(), static_cast<int>(i + 1), sizes[i]);
  }
  // No two allocations overlap: each still holds its own fill.
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint8_t* p = blocks[i].get();
    EXPECT_EQ(p[0], i + 1);
    EXPECT_EQ(p[sizes[i] - 1], i + 1);
  }
}

}  // namespace
}  // namespace qs
