// The decoder's ops on every backend (ops/backend.h) against the scalar oracles of kernels/ref
// and ops::paged_attention_ref: inputs go in through the backend's copies and results come back
// the same way, so one test body covers the CPU here and a GPU wherever one exists. A backend
// this build or machine lacks is skipped by name with the reason (no CUDA build, no device).
// Tolerances: the CPU computes in f32 (1e-5 relative); the CUDA backend's matmuls take bf16
// activations, as vLLM's do (2e-2 relative), its other ops f32 (1e-4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/ref/elementwise_ref.h"
#include "kernels/ref/linear_ref.h"
#include "ops/attention.h"
#include "ops/backend.h"

namespace qs {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto device = parse_device(GetParam());
    ASSERT_TRUE(device.ok()) << device.status().message();
    auto backend = ops::backend_for(*device);
    if (!backend.ok()) GTEST_SKIP() << GetParam() << ": " << backend.status().message();
    backend_ = *backend;
  }

  ops::Backend& b() { return *backend_; }
  bool cpu() const { return backend_->device().is_cpu(); }
  float op_tol() const { return cpu() ? 1e-5f : 1e-4f; }
  float matmul_tol() const { return cpu() ? 1e-5f : 2e-2f; }

  // A backend copy of host floats (kept alive by the test).
  float* upload(const std::vector<float>& host) {
    auto t = b().zeros(DType::kF32, {static_cast<int64_t>(std::max<size_t>(host.size(), 1))});
    EXPECT_TRUE(t.ok());
    keep_.push_back(*t);
    float* p = t->mutable_ptr<float>();
    EXPECT_TRUE(b().copy_from_host(p, host.data(), host.size() * sizeof(float)).ok());
    return p;
  }
  float* device_zeros(size_t n) { return upload(std::vector<float>(n, 0.0f)); }
  std::vector<float> download(const float* p, size_t n) {
    std::vector<float> host(n);
    EXPECT_TRUE(b().copy_to_host(host.data(), p, n * sizeof(float)).ok());
    EXPECT_TRUE(b().synchronize().ok());
    return host;
  }

  // |got - want| <= tol * (1 + |want|) element by element.
  static void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol,
                           const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << what << " at " << i;
    }
  }

  std::shared_ptr<ops::Backend> backend_;
  std::vector<Tensor> keep_;
  ThreadPool pool_{2};
};

TEST_P(BackendOps, CopiesRoundTrip) {
  const std::vector<float> host = random_vec(1000, 1);
  float* a = upload(host);
  float* c = device_zeros(host.size());
  ASSERT_TRUE(b().copy(c, a, host.size() * sizeof(float)).ok());
  EXPECT_EQ(download(c, host.size()), host);
}

TEST_P(BackendOps, DeviceArrayKeepsItsStorageWhenItShrinks) {
  ops::DeviceArray<float> a;
  ASSERT_TRUE(a.resize(b(), 100).ok());
  float* first = a.data();
  ASSERT_TRUE(a.resize(b(), 10).ok());
  EXPECT_EQ(a.data(), first);
  EXPECT_EQ(a.size(), 10);
  ASSERT_TRUE(a.resize(b(), 1000).ok());
  EXPECT_EQ(a.size(), 1000);
  EXPECT_EQ(download(a.data(), 1000), std::vector<float>(1000, 0.0f));  // grown zeroed
}

TEST_P(BackendOps, RmsNormSiluMulAddMatchTheOracles) {
  const int64_t m = 5, d = 896;
  const std::vector<float> x = random_vec(m * d, 2, 3.0f), w = random_vec(d, 3);
  std::vector<float> want(m * d);
  kernels::ref::rms_norm(x.data(), m, d, w.data(), 1e-6f, want.data());
  ASSERT_TRUE(b().adopt_params(w).ok());
  float* xd = upload(x);
  float* yd = device_zeros(m * d);
  b().rms_norm(xd, m, d, b().params(w), 1e-6f, yd);
  expect_close(download(yd, m * d), want, op_tol(), "rms_norm");

  const std::vector<float> gate = random_vec(m * d, 4, 4.0f), up = random_vec(m * d, 5);
  kernels::ref::silu_mul(gate.data(), up.data(), m * d, want.data());
  float* gd = upload(gate);
  b().silu_mul(gd, upload(up), m * d, gd);  // in place, as the MLP calls it
  expect_close(download(gd, m * d), want, op_tol(), "silu_mul");

  want = x;
  kernels::ref::add_inplace(want.data(), gate.data(), m * d);
  b().add_inplace(xd, upload(gate), m * d);
  expect_close(download(xd, m * d), want, op_tol(), "add_inplace");
}

TEST_P(BackendOps, RopeRotateHalfMatchesTheOracle) {
  const int64_t n_tokens = 7, n_heads = 3, head_dim = 64;
  std::vector<float> x = random_vec(n_tokens * n_heads * head_dim, 6);
  const std::vector<float> cos = random_vec(n_tokens * head_dim / 2, 7),
                           sin = random_vec(n_tokens * head_dim / 2, 8);
  float* xd = upload(x);
  b().rope_rotate_half(xd, n_tokens, n_heads, head_dim, upload(cos), upload(sin));
  kernels::ref::rope_rotate_half(x.data(), n_tokens, n_heads, head_dim, cos.data(), sin.data());
  expect_close(download(xd, x.size()), x, op_tol(), "rope");
}

TEST_P(BackendOps, LinearOfAnAdoptedBf16WeightMatchesTheOracle) {
  for (const int64_t m : {1, 3, 16, 37}) {
    const int64_t n = 96, k = 256;
    const std::vector<float> x = random_vec(m * k, 9), bias = random_vec(n, 10);
    const Tensor w = Tensor::from_f32(DType::kBF16, {n, k}, random_vec(n * k, 11, 0.1f));
    std::vector<float> want(m * n);
    kernels::ref::linear(x.data(), m, k, w.data, DType::kBF16, n, 0, n, want.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) want[i * n + j] += bias[j];
    auto adopted = b().adopt_linear(ops::LinearWeight(w));
    ASSERT_TRUE(adopted.ok()) << adopted.status().message();
    ASSERT_TRUE(b().adopt_params(bias).ok());
    float* y = device_zeros(m * n);
    ASSERT_TRUE(b().linear(upload(x), m, *adopted, b().params(bias), y, pool_).ok());
    expect_close(download(y, m * n), want, matmul_tol(), "linear m=" + std::to_string(m));
  }
}

TEST_P(BackendOps, EmbedRowsFillsOnlyItsShardsRows) {
  const int64_t rows = 10, d = 32, offset = 5;
  const std::vector<float> table_host = random_vec(rows * d, 12);
  const Tensor table_bf16 = Tensor::from_f32(DType::kBF16, {rows, d}, table_host);
  auto adopted = b().adopt_linear(ops::LinearWeight(table_bf16));
  ASSERT_TRUE(adopted.ok());
  const std::vector<int32_t> ids = {5, 14, 3, 15, 9};  // 3 and 15 belong to other shards
  std::vector<float> sentinel(ids.size() * d, -7.0f);
  float* out = upload(sentinel);
  ASSERT_TRUE(b().embed_rows(adopted->dense, ids, offset, out).ok());
  const std::vector<float> got = download(out, sentinel.size());
  for (size_t t = 0; t < ids.size(); ++t) {
    const int64_t row = ids[t] - offset;
    for (int64_t j = 0; j < d; ++j) {
      const float want =
          row >= 0 && row < rows ? bf16_to_f32(f32_to_bf16(table_host[row * d + j])) : -7.0f;
      ASSERT_EQ(got[t * d + j], want) << "token " << t << " column " << j;
    }
  }
}

// The paged KV write and attention over a cache the backend allocated, for two sequences (one
// prefilling past a block boundary with a cached prefix, one decoding), in every cache dtype.
TEST_P(BackendOps, PagedAttentionMatchesTheOracleInEveryCacheDtype) {
  const int64_t n_kv = 2, n_heads = 4, head_dim = 32, block = 16, n_blocks = 8;
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(dtype_name(dtype));
    ops::PagedKvLayer cache, cache_ref;
    cache.dtype = dtype;
    cache.n_blocks = n_blocks;
    cache.block_size = block;
    cache.n_kv_heads = n_kv;
    cache.head_dim = head_dim;
    if (dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2) {
      cache.k_scale = 0.05f;
      cache.v_scale = 0.03f;
    }
    cache_ref = cache;
    const std::vector<int64_t> shape = {n_blocks, block, n_kv, head_dim};
    auto k = b().zeros(dtype, shape), v = b().zeros(dtype, shape);
    ASSERT_TRUE(k.ok() && v.ok());
    cache.k = k->writable_data;
    cache.v = v->writable_data;
    Tensor k_ref = Tensor::zeros(dtype, shape), v_ref = Tensor::zeros(dtype, shape);
    cache_ref.k = k_ref.writable_data;
    cache_ref.v = v_ref.writable_data;

    const std::vector<int32_t> table_a = {3, 0, 5}, table_b = {6, 1};
    // Step 1 fills 12 cached tokens of a and 20 of b; step 2 prefills 9 more of a (crossing
    // into its second block) and decodes one of b.
    const std::vector<std::vector<ops::AttentionSeq>> steps = {
        {{0, 12, 0, table_a}, {12, 20, 0, table_b}}, {{0, 9, 12, table_a}, {9, 1, 20, table_b}}};
    uint32_t seed = 20;
    for (const auto& seqs : steps) {
      int64_t n_tokens = 0;
      for (const auto& s : seqs) n_tokens += s.n_query;
      const std::vector<float> q = random_vec(n_tokens * n_heads * head_dim, seed++),
                               kn = random_vec(n_tokens * n_kv * head_dim, seed++),
                               vn = random_vec(n_tokens * n_kv * head_dim, seed++);
      ops::AttentionParams params;
      params.n_heads = n_heads;
      params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      ops::paged_kv_write(cache_ref, seqs, kn.data(), vn.data());
      std::vector<float> want(q.size());
      ASSERT_TRUE(ops::paged_attention_ref(q.data(), cache_ref, seqs, params, want.data()).ok());

      b().paged_kv_write(cache, seqs, upload(kn), upload(vn));
      float* out = device_zeros(q.size());
      ASSERT_TRUE(b().paged_attention(upload(q), cache, seqs, params, out, pool_).ok());
      expect_close(download(out, q.size()), want, cpu() ? 1e-5f : 1e-3f, "attention");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, BackendOps, ::testing::Values("cpu", "cuda:0"),
                         [](const auto& p) {
                           std::string s = p.param;
                           std::replace(s.begin(), s.end(), ':', '_');
                           return s;
                         });

TEST(Devices, NamesParseAndPrint) {
  EXPECT_EQ(device_name(*parse_device("cpu")), "cpu");
  EXPECT_EQ(device_name(*parse_device("cuda")), "cuda:0");
  EXPECT_EQ(device_name(*parse_device("cuda:3")), "cuda:3");
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", ""}) {
    auto d = parse_device(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("expected cpu, cuda or cuda:N"), std::string::npos);
  }
}

TEST(Devices, AutoIsTheGpuOnlyWhereTheBackendCanBeMade) {
  auto d = ops::resolve_device("auto");
  ASSERT_TRUE(d.ok());
  std::string why;
  const bool gpu = ops::cuda_backend_built() && ops::cuda_device_count(&why) > 0;
  EXPECT_EQ(d->is_cpu(), !gpu) << why;
  auto cuda = ops::backend_for(Device{DeviceType::kCuda, 7});
  if (!gpu || ops::cuda_device_count() <= 7) {
    ASSERT_FALSE(cuda.ok());
    EXPECT_NE(cuda.status().message().find("cuda:7"), std::string::npos) << cuda.status().message();
  }
}

TEST(Devices, StridedViewsSayTheyAreNotContiguous) {
  Tensor t = Tensor::zeros(DType::kF32, {4, 6});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.stride(0), 6);
  EXPECT_EQ(t.stride(-1), 1);
  Tensor cols = t;  // columns 2..4 of every row
  cols.shape = {4, 3};
  cols.strides = {6, 1};
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.stride(0), 6);
  cols.strides = {3, 1};
  EXPECT_TRUE(cols.is_contiguous());
}

}  // namespace
}  // namespace qs
