// tests: the CUDA kernels of the common decoder ops (kernels/cuda: elementwise, sampling, paged
// KV cache and attention, cuBLASLt bf16 linear) against the CPU's oracles on random inputs.
// Tolerances, per op below, follow from how each kernel's arithmetic differs from its oracle:
//   exact      add_inplace, rope (each product and sum rounded alone on both sides), the
//              conversions (embedding rows, f32 -> bf16, cache writes: bit for bit), argmax;
//   ~1e-6 rel  silu_mul (the device expf is within 2 ulp of glibc's);
//   1e-5 rel   rms_norm (f32 block-tree sum against the oracle's double sum), row sum-exp;
//   1e-4       attention (online softmax and another summation order; the same cache bytes);
//   1e-4 * sum|x w|  the bf16 linear (f32 accumulation of exact bf16 products, any order).
// Needs a GPU: every test skips, saying why, where the runtime finds none (ctest label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "cuda_device_buffer.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm_cublas.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/sampling.h"
#include "kernels/ref/elementwise_ref.h"
#include "ops/attention.h"

namespace qs::kernels::cuda {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// The same value bit for bit, or both NaN.
bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    QS_SKIP_WITHOUT_GPU();
    QS_ASSERT_CUDA(stream_create(&stream_));
  }

  void TearDown() override {
    for (void* p : allocations_) EXPECT_TRUE(device_free(p).ok());
    if (stream_ != nullptr) {
      EXPECT_TRUE(stream_destroy(stream_).ok());
    }
  }

  // Device memory for n values, freed after the test; a failure fails the test.
  template <class T>
  T* alloc(size_t n) {
    void* p = nullptr;
    const CudaStatus s = device_malloc(&p, std::max<size_t>(n, 1) * sizeof(T));
    EXPECT_TRUE(s.ok()) << s.message;
    if (p != nullptr) allocations_.push_back(p);
    return static_cast<T*>(p);
  }

  template <class T>
  T* upload(const std::vector<T>& host) {
    T* d = alloc<T>(host.size());
    const CudaStatus s =
        copy(d, host.data(), host.size() * sizeof(T), CopyKind::kHostToDevice, stream_);
    EXPECT_TRUE(s.ok()) << s.message;
    return d;
  }

  // Waits for the stream and reads n values back.
  template <class T>
  std::vector<T> download(const T* d, size_t n) {
    std::vector<T> host(n);
    const CudaStatus s = copy(host.data(), d, n * sizeof(T), CopyKind::kDeviceToHost, stream_);
    EXPECT_TRUE(s.ok()) << s.message;
    return host;
  }

  Stream stream_ = nullptr;
  std::vector<void*> allocations_;
};

TEST_F(CudaKernelsTest, RmsNormMatchesTheOracle) {
  for (int64_t d : {1, 7, 64, 896, 4097, 8192}) {
    const int64_t m = 3;
    const std::vector<float> x = random_floats(m * d, static_cast<uint32_t>(d), 2.0f);
    const std::vector<float> w = random_floats(d, static_cast<uint32_t>(d + 1));
    std::vector<float> want(x.size());
    ref::rms_norm(x.data(), m, d, w.data(), 1e-6f, want.data());
    float* dx = upload(x);
    float* dw = upload(w);
    float* dy = alloc<float>(x.size());
    QS_ASSERT_CUDA(rms_norm(dx, m, d, dw, 1e-6f, dy, stream_));
    std::vector<float> got = download(dy, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-6) << "d=" << d << " i=" << i;
    }
    // In place, as the model calls it.
    QS_ASSERT_CUDA(rms_norm(dx, m, d, dw, 1e-6f, dx, stream_));
    got = download(dx, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-6) << "in place d=" << d;
    }
  }
}

TEST_F(CudaKernelsTest, RopeMatchesTheOracleExactly) {
  for (int64_t head_dim : {2, 64, 80, 128}) {
    const int64_t n_tokens = 5, n_heads = 3, half = head_dim / 2;
    std::vector<float> x = random_floats(n_tokens * n_heads * head_dim, 11);
    std::vector<float> cos(n_tokens * half), sin(n_tokens * half);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t j = 0; j < half; ++j) {
        const double angle = (t + 3) * std::pow(10000.0, -2.0 * j / head_dim);
        cos[t * half + j] = static_cast<float>(std::cos(angle));
        sin[t * half + j] = static_cast<float>(std::sin(angle));
      }
    }
    float* dx = upload(x);
    float* dcos = upload(cos);
    float* dsin = upload(sin);
    QS_ASSERT_CUDA(rope_rotate_half(dx, n_tokens, n_heads, head_dim, dcos, dsin, stream_));
    ref::rope_rotate_half(x.data(), n_tokens, n_heads, head_dim, cos.data(), sin.data());
    const std::vector<float> got = download(dx, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(same_float(got[i], x[i]))
          << "head_dim=" << head_dim << " i=" << i << ": " << got[i] << " vs " << x[i];
    }
  }
}

TEST_F(CudaKernelsTest, SiluMulAndAddMatchTheOracle) {
  for (int64_t n : {1, 1000, 100003}) {
    const std::vector<float> gate = random_floats(n, 3, 3.0f), up = random_floats(n, 4);
    std::vector<float> want(n);
    ref::silu_mul(gate.data(), up.data(), n, want.data());
    float* dg = upload(gate);
    float* du = upload(up);
    QS_ASSERT_CUDA(silu_mul(dg, du, n, dg, stream_));  // out aliases gate
    const std::vector<float> got = download(dg, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-30) << "n=" << n << " i=" << i;
    }
    std::vector<float> y = random_floats(n, 5);
    float* dy = upload(y);
    QS_ASSERT_CUDA(add_inplace(dy, du, n, stream_));
    ref::add_inplace(y.data(), up.data(), n);
    const std::vector<float> sum = download(dy, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(sum[i], y[i])) << "add i=" << i;
  }
}

TEST_F(CudaKernelsTest, EmbeddingGatherConvertsRowsAndSkipsForeignIds) {
  const int64_t n_rows = 50, hidden = 896, row_offset = 10;
  const std::vector<float> values = random_floats(n_rows * hidden, 21);
  // Ids of this shard's rows, repeated ones, and ids of other shards (below and above).
  const std::vector<int32_t> ids = {10, 59, 33, 33, 9, 60, -1, 11};
  const float kUntouched = 7.0f;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> table(n_rows * hidden * dtype_size(dtype));
    for (int64_t i = 0; i < n_rows * hidden; ++i) {
      if (dtype == DType::kF32) {
        std::memcpy(table.data() + 4 * i, &values[i], 4);
      } else {
        const uint16_t h =
            dtype == DType::kBF16 ? qs::f32_to_bf16(values[i]) : qs::f32_to_f16(values[i]);
        std::memcpy(table.data() + 2 * i, &h, 2);
      }
    }
    const uint8_t* dtable = upload(table);
    const int32_t* dids = upload(ids);
    float* dout = upload(std::vector<float>(ids.size() * hidden, kUntouched));
    QS_ASSERT_CUDA(embedding_gather(dtable, dtype, n_rows, hidden, dids,
                                    static_cast<int64_t>(ids.size()), row_offset, dout, stream_));
    const std::vector<float> got = download(dout, ids.size() * hidden);
    for (size_t t = 0; t < ids.size(); ++t) {
      const int64_t row = ids[t] - row_offset;
      for (int64_t j = 0; j < hidden; ++j) {
        const float want = row >= 0 && row < n_rows
                               ? load_as_f32(dtype, table.data(), row * hidden + j)
                               : kUntouched;
        ASSERT_TRUE(same_float(got[t * hidden + j], want))
            << dtype_name(dtype) << " id " << ids[t] << " j=" << j;
      }
    }
  }
}

TEST_F(CudaKernelsTest, F32ToBf16MatchesCoreBitForBit) {
  std::vector<float> x = random_floats(100000, 8, 100.0f);
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.00390625f, 1.01171875f, 3.4e38f, 1e-40f,
                  -1e-45f}) {
    x.push_back(v);
  }
  const float* dx = upload(x);
  uint16_t* dy = alloc<uint16_t>(x.size());
  QS_ASSERT_CUDA(cast_f32_to_bf16(dx, static_cast<int64_t>(x.size()), dy, stream_));
  const std::vector<uint16_t> got = download(dy, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(got[i], qs::f32_to_bf16(x[i])) << "x=" << x[i];
  }
}

// engine/sampler.cc's greedy choice: the lowest id among the largest values; NaN never wins.
int32_t host_argmax(const float* row, int64_t n) {
  int32_t best = 0;
  float best_v = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] > best_v) {
      best_v = row[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// Rows of logits that exercise the tie and NaN rules, then random vocabulary-sized ones.
std::vector<std::vector<float>> sampling_rows(int64_t n) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  rows.push_back(random_floats(n, 30, 4.0f));
  std::vector<float> ties = random_floats(n, 31);
  for (int64_t i : {n - 1, n / 2, n / 3}) ties[i] = 50.0f;  // the lowest, n / 3, must win
  rows.push_back(ties);
  std::vector<float> nans = random_floats(n, 32);
  for (int64_t i = 0; i < n; i += 3) nans[i] = NAN;
  rows.push_back(nans);
  rows.push_back(std::vector<float>(n, -inf));
  rows.push_back(std::vector<float>(n, NAN));
  std::vector<float> pos_inf = random_floats(n, 33);
  pos_inf[n - 1] = inf;
  pos_inf[n / 2] = inf;
  rows.push_back(pos_inf);
  std::vector<float> one_finite(n, -inf);
  one_finite[n - 1] = -3.0f;
  rows.push_back(one_finite);
  return rows;
}

TEST_F(CudaKernelsTest, ArgmaxFollowsTheSamplersRule) {
  for (int64_t n : {1, 33, 1000, 151936}) {
    const std::vector<std::vector<float>> rows = sampling_rows(n);
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    const float* dx = upload(flat);
    int32_t* dout = alloc<int32_t>(rows.size());
    QS_ASSERT_CUDA(argmax_rows(dx, static_cast<int64_t>(rows.size()), n, dout, stream_));
    const std::vector<int32_t> got = download(dout, rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(got[r], host_argmax(rows[r].data(), n)) << "n=" << n << " row " << r;
    }
  }
}

TEST_F(CudaKernelsTest, RowMaxSumExpMatchesADoubleReference) {
  const float inv_t = 1.0f / 0.7f;
  for (int64_t n : {1, 33, 151936}) {
    const std::vector<std::vector<float>> rows = sampling_rows(n);
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    const float* dx = upload(flat);
    float* dmax = alloc<float>(rows.size());
    float* dsum = alloc<float>(rows.size());
    QS_ASSERT_CUDA(
        row_max_sum_exp(dx, static_cast<int64_t>(rows.size()), n, inv_t, dmax, dsum, stream_));
    const std::vector<float> got_max = download(dmax, rows.size());
    const std::vector<float> got_sum = download(dsum, rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      float mx = -std::numeric_limits<float>::infinity();
      for (float v : rows[r]) {
        if (!std::isnan(v)) mx = std::max(mx, v * inv_t);
      }
      double sum = 0.0;
      if (std::isfinite(mx)) {
        for (float v : rows[r]) {
          if (!std::isnan(v)) sum += std::exp(static_cast<double>(v * inv_t) - mx);
        }
      }
      EXPECT_TRUE(same_float(got_max[r], mx)) << "n=" << n << " row " << r;
      EXPECT_NEAR(got_sum[r], sum, 1e-5 * sum) << "n=" << n << " row " << r;
    }
  }
}

// --- paged KV cache and attention ---

// A batch for the paged kernels, made on the host: its sequences with their block tables over
// a cache whose blocks are handed out in a shuffled order (as a long-running engine's are).
struct PagedBatch {
  std::vector<ops::AttentionSeq> seqs;
  std::vector<std::vector<int32_t>> tables;
  int64_t n_tokens = 0, n_blocks = 0, max_seq_len = 0;

  // (start_pos, n_query) per sequence.
  PagedBatch(const std::vector<std::pair<int64_t, int64_t>>& shape, int64_t block_size,
             uint32_t seed) {
    for (const auto& [start, n] : shape) {
      n_blocks += (start + n + block_size - 1) / block_size;
      max_seq_len = std::max(max_seq_len, start + n);
    }
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    int64_t next = 0;
    for (const auto& [start, n] : shape) {
      const int64_t need = (start + n + block_size - 1) / block_size;
      tables.emplace_back(ids.begin() + next, ids.begin() + next + need);
      next += need;
    }
    for (size_t i = 0; i < shape.size(); ++i) {
      seqs.push_back({n_tokens, shape[i].second, shape[i].first, tables[i]});
      n_tokens += shape[i].second;
    }
  }

  // The device descriptors: PagedSeq per sequence, the block tables end to end.
  void device_form(std::vector<PagedSeq>* out_seqs, std::vector<int32_t>* flat_tables) const {
    for (size_t i = 0; i < seqs.size(); ++i) {
      out_seqs->push_back(
          {static_cast<int32_t>(seqs[i].query_start), static_cast<int32_t>(seqs[i].n_query),
           static_cast<int32_t>(seqs[i].start_pos), static_cast<int32_t>(flat_tables->size())});
      flat_tables->insert(flat_tables->end(), tables[i].begin(), tables[i].end());
    }
  }
};

struct CacheCase {
  DType dtype;
  float k_scale, v_scale;
};

const CacheCase kCacheCases[] = {{DType::kF32, 1.0f, 1.0f},
                                 {DType::kBF16, 1.0f, 1.0f},
                                 {DType::kF8E4M3, 0.02f, 0.015f},
                                 {DType::kF8E5M2, 0.5f, 0.25f}};

TEST_F(CudaKernelsTest, PagedKvWriteStoresTheCpusBytes) {
  const int64_t block_size = 16, n_kv_heads = 2, head_dim = 40, row = n_kv_heads * head_dim;
  const PagedBatch batch({{0, 37}, {50, 20}, {99, 1}}, block_size, 7);
  std::vector<PagedSeq> seqs;
  std::vector<int32_t> tables;
  batch.device_form(&seqs, &tables);
  std::vector<float> k = random_floats(batch.n_tokens * row, 40, 3.0f);
  std::vector<float> v = random_floats(batch.n_tokens * row, 41, 3.0f);
  // Values past each format's range (saturation), infinities, NaN and signed zeros.
  const float specials[] = {1e6f, -1e6f, INFINITY, -INFINITY, NAN, -0.0f, 0.0f, 1e-30f, 9.0f};
  for (size_t i = 0; i < std::size(specials); ++i) {
    k[i * 7] = specials[i];
    v[i * 5 + 3] = specials[i];
  }
  const PagedSeq* dseqs = upload(seqs);
  const int32_t* dtables = upload(tables);
  const float* dk = upload(k);
  const float* dv = upload(v);
  for (const CacheCase& c : kCacheCases) {
    const size_t bytes = batch.n_blocks * block_size * row * dtype_size(c.dtype);
    std::vector<uint8_t> host_k(bytes, 0x5a), host_v(bytes, 0x5a);
    const ops::PagedKvLayer host{c.dtype,        host_k.data(), host_v.data(),
                                 batch.n_blocks, block_size,    n_kv_heads,
                                 head_dim,       c.k_scale,     c.v_scale};
    ops::paged_kv_write(host, batch.seqs, k.data(), v.data());
    uint8_t* dcache_k = upload(std::vector<uint8_t>(bytes, 0x5a));
    uint8_t* dcache_v = upload(std::vector<uint8_t>(bytes, 0x5a));
    const PagedKvCache dev{c.dtype,    dcache_k, dcache_v,  block_size,
                           n_kv_heads, head_dim, c.k_scale, c.v_scale};
    QS_ASSERT_CUDA(paged_kv_write(dev, dseqs, static_cast<int32_t>(seqs.size()), dtables, dk, dv,
                                  batch.n_tokens, stream_));
    EXPECT_EQ(download(dcache_k, bytes), host_k) << dtype_name(c.dtype);
    EXPECT_EQ(download(dcache_v, bytes), host_v) << dtype_name(c.dtype);
  }
}

struct AttentionCase {
  const char* name;
  std::vector<std::pair<int64_t, int64_t>> shape;  // (start_pos, n_query) per sequence
  int64_t n_heads, n_kv_heads, head_dim, block_size, sliding_window;
};

const AttentionCase kAttentionCases[] = {
    // Prefill, a chunked prefill and a decode step in one batch; 7 query heads per kv head.
    {"mixed_gqa7", {{0, 37}, {50, 20}, {99, 1}}, 14, 2, 64, 16, 0},
    // Decode over long contexts; 12 query heads per kv head take two blocks of heads.
    {"decode_gqa12", {{1200, 1}, {2047, 1}, {5, 1}, {700, 1}}, 12, 1, 128, 32, 0},
    // Multi-head (no grouping), a head_dim that is no multiple of 32, a sliding window
    // shorter than the prompts.
    {"window_mha", {{0, 45}, {60, 3}, {130, 1}}, 3, 3, 80, 16, 40},
    // The largest head_dim, and a prefill chunk long enough to split.
    {"hd256", {{600, 40}, {0, 9}}, 8, 2, 256, 16, 0},
};

TEST_F(CudaKernelsTest, PagedAttentionMatchesTheReference) {
  for (const AttentionCase& ac : kAttentionCases) {
    const PagedBatch batch(ac.shape, ac.block_size, 9);
    std::vector<PagedSeq> seqs;
    std::vector<int32_t> tables;
    batch.device_form(&seqs, &tables);
    const int64_t kv_row = ac.n_kv_heads * ac.head_dim, q_row = ac.n_heads * ac.head_dim;
    // Every cached position gets a key and value, written by the CPU (so both sides read the
    // same bytes); the batch's new tokens are the last n_query of each sequence.
    std::vector<ops::AttentionSeq> whole;
    int64_t n_cached = 0;
    for (const ops::AttentionSeq& s : batch.seqs) {
      whole.push_back({n_cached, s.start_pos + s.n_query, 0, s.block_table});
      n_cached += s.start_pos + s.n_query;
    }
    const std::vector<float> k = random_floats(n_cached * kv_row, 50);
    const std::vector<float> v = random_floats(n_cached * kv_row, 51);
    const std::vector<float> q = random_floats(batch.n_tokens * q_row, 52);
    const PagedSeq* dseqs = upload(seqs);
    const int32_t* dtables = upload(tables);
    const float* dq = upload(q);
    for (const CacheCase& c : kCacheCases) {
      const size_t bytes = batch.n_blocks * ac.block_size * kv_row * dtype_size(c.dtype);
      std::vector<uint8_t> host_k(bytes), host_v(bytes);
      const ops::PagedKvLayer host{c.dtype,        host_k.data(), host_v.data(),
                                   batch.n_blocks, ac.block_size, ac.n_kv_heads,
                                   ac.head_dim,    c.k_scale,     c.v_scale};
      ops::paged_kv_write(host, whole, k.data(), v.data());
      const ops::AttentionParams params{ac.n_heads, 1.0f / std::sqrt(float(ac.head_dim)),
                                        ac.sliding_window};
      std::vector<float> want(batch.n_tokens * q_row);
      const Status st = ops::paged_attention_ref(q.data(), host, batch.seqs, params, want.data());
      ASSERT_TRUE(st.ok()) << st.to_string();

      PagedAttentionArgs args;
      args.q = dq;
      args.cache = {c.dtype,       upload(host_k), upload(host_v), ac.block_size,
                    ac.n_kv_heads, ac.head_dim,    c.k_scale,      c.v_scale};
      args.seqs = dseqs;
      args.n_seqs = static_cast<int32_t>(seqs.size());
      args.block_tables = dtables;
      args.n_tokens = batch.n_tokens;
      args.n_heads = ac.n_heads;
      args.scale = params.scale;
      args.sliding_window = ac.sliding_window;
      args.max_seq_len = batch.max_seq_len;
      // Each case once walking all keys in one block, once split into partitions (where its
      // keys are more than one partition holds).
      const size_t ws_bytes = paged_attention_workspace_bytes(
          batch.n_tokens, ac.n_heads, ac.head_dim, batch.max_seq_len, ac.sliding_window);
      for (bool split : {false, true}) {
        if (split && ws_bytes == 0) continue;
        args.out = alloc<float>(want.size());
        args.workspace = split ? alloc<float>(ws_bytes / sizeof(float)) : nullptr;
        QS_ASSERT_CUDA(paged_attention(args, stream_));
        const std::vector<float> got = download(args.out, want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-4 * (1.0 + std::fabs(want[i])))
              << ac.name << " " << dtype_name(c.dtype) << (split ? " split" : "") << " token "
              << i / q_row << " head " << i % q_row / ac.head_dim << " dim " << i % ac.head_dim;
        }
      }
    }
  }
}

// Host arithmetic only: runs without a GPU.
TEST(CudaPagedAttention, PartitionsCoverTheLongestKeyRange) {
  EXPECT_EQ(paged_attention_partitions(1, 0), 1);
  EXPECT_EQ(paged_attention_partitions(kAttentionPartitionKeys, 0), 1);
  EXPECT_EQ(paged_attention_partitions(kAttentionPartitionKeys + 1, 0), 2);
  EXPECT_EQ(paged_attention_partitions(10 * kAttentionPartitionKeys, 100), 1);  // the window
  EXPECT_EQ(paged_attention_workspace_bytes(4, 8, 64, 100, 0), 0u);
  EXPECT_EQ(paged_attention_workspace_bytes(4, 8, 64, 3 * kAttentionPartitionKeys, 0),
            4u * 8 * 3 * (64 + 2) * sizeof(float));
}

// --- the cuBLASLt linear ---

TEST_F(CudaKernelsTest, CublasLtLinearBf16MatchesADoubleReference) {
  std::unique_ptr<CublasLtGemm> gemm;
  QS_ASSERT_CUDA(CublasLtGemm::create(32u << 20, &gemm));
  struct Shape {
    int64_t m, n, k;
    bool bias, offset_x;  // offset_x: x starts one row into its buffer (16-byte alignment)
  };
  const Shape shapes[] = {{1, 96, 64, false, false},   {7, 256, 896, true, false},
                          {33, 1000, 520, true, true}, {64, 128, 4096, false, false},
                          {1, 4864, 896, true, true},  {7, 256, 896, true, false}};
  for (const Shape& sh : shapes) {
    const int64_t rows = sh.m + (sh.offset_x ? 1 : 0);
    std::vector<uint16_t> x(rows * sh.k), w(sh.n * sh.k);
    const std::vector<float> xf = random_floats(x.size(), 60), wf = random_floats(w.size(), 61);
    for (size_t i = 0; i < x.size(); ++i) x[i] = qs::f32_to_bf16(xf[i]);
    for (size_t i = 0; i < w.size(); ++i) w[i] = qs::f32_to_bf16(wf[i]);
    const std::vector<float> bias = random_floats(sh.n, 62);
    const uint16_t* dx = upload(x) + (sh.offset_x ? sh.k : 0);
    const uint16_t* dw = upload(w);
    const float* dbias = sh.bias ? upload(bias) : nullptr;
    float* dy = alloc<float>(sh.m * sh.n);
    QS_ASSERT_CUDA(gemm->linear_bf16(dx, dw, dbias, sh.m, sh.n, sh.k, dy, stream_));
    const std::vector<float> got = download(dy, sh.m * sh.n);
    const uint16_t* hx = x.data() + (sh.offset_x ? sh.k : 0);
    for (int64_t i = 0; i < sh.m; ++i) {
      for (int64_t j = 0; j < sh.n; ++j) {
        double want = sh.bias ? bias[j] : 0.0, magnitude = 0.0;
        for (int64_t p = 0; p < sh.k; ++p) {
          const double prod =
              double(bf16_to_f32(hx[i * sh.k + p])) * double(bf16_to_f32(w[j * sh.k + p]));
          want += prod;
          magnitude += std::fabs(prod);
        }
        ASSERT_NEAR(got[i * sh.n + j], want, 1e-4 * magnitude + 1e-5)
            << "m=" << sh.m << " n=" << sh.n << " k=" << sh.k << " bias=" << sh.bias << " at (" << i
            << ", " << j << ")";
      }
    }
  }
}

}  // namespace
}  // namespace qs::kernels::cuda
