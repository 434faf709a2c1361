// Kernel lab for ops::paged_attention on each KV-cache dtype (--kv-cache-dtype auto = f32,
// bfloat16, fp8_e4m3, fp8_e5m2): decode steps (one query token per sequence) of one
// Qwen2.5-0.5B-shaped layer (14 query heads, 2 kv heads, head_dim 64) at several context
// lengths and batch sizes, 1 and 2 threads. Counter: GB/s of K/V bytes read. A decode step
// reads every cached key and value once, so at long context the cache dtype sets its cost.
// Run: build/bench/attention_bench --benchmark_enable_random_interleaving=true
//        --benchmark_repetitions=5 (interleaved, so that the dtypes see the same load)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/attention.h"

namespace qs {
namespace {

constexpr int64_t kHeads = 14, kKvHeads = 2, kHeadDim = 64, kBlock = 16;

void BM_DecodeAttention(benchmark::State& state, DType dtype) {
  const int64_t context = state.range(0), batch = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const int64_t blocks_per_seq = (context + kBlock) / kBlock;
  const int64_t n_blocks = blocks_per_seq * batch;
  const int64_t elems = n_blocks * kBlock * kKvHeads * kHeadDim;
  std::vector<uint8_t> k_bytes(elems * dtype_size(dtype)), v_bytes(k_bytes.size());
  ops::PagedKvLayer cache{dtype,  k_bytes.data(), v_bytes.data(), n_blocks,
                          kBlock, kKvHeads,       kHeadDim};
  // Fill through paged_kv_write, so fp8 holds real codes, not zeros.
  std::mt19937 rng(1);
  std::normal_distribution<float> noise;
  std::vector<std::vector<int32_t>> tables(batch);
  std::vector<ops::AttentionSeq> fill, step;
  for (int64_t b = 0; b < batch; ++b) {
    tables[b].resize(blocks_per_seq);
    std::iota(tables[b].begin(), tables[b].end(), static_cast<int32_t>(b * blocks_per_seq));
  }
  std::vector<float> kv_rows((context + 1) * kKvHeads * kHeadDim);
  for (int64_t b = 0; b < batch; ++b) {
    for (auto& x : kv_rows) x = noise(rng);
    std::vector<ops::AttentionSeq> one = {{0, context + 1, 0, tables[b]}};
    ops::paged_kv_write(cache, one, kv_rows.data(), kv_rows.data());
    step.push_back({b, 1, context, tables[b]});
  }
  std::vector<float> q(batch * kHeads * kHeadDim), out(q.size());
  for (auto& x : q) x = noise(rng);
  ThreadPool pool(threads);
  ops::AttentionParams p{kHeads, 0.125f, 0};
  for (auto _ : state) {
    if (!ops::paged_attention(q.data(), cache, step, p, out.data(), pool).ok()) {
      state.SkipWithError("paged_attention failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = 2.0 * static_cast<double>(batch) * static_cast<double>(context + 1) *
                       kKvHeads * kHeadDim * static_cast<double>(dtype_size(dtype));
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

void args(benchmark::internal::Benchmark* b) {
  for (int64_t threads : {1, 2}) {
    for (int64_t context : {512, 2048, 8192}) {
      for (int64_t batch : {1, 8}) b->Args({context, batch, threads});
    }
  }
  b->ArgNames({"ctx", "batch", "threads"})->UseRealTime();
}

BENCHMARK_CAPTURE(BM_DecodeAttention, auto_f32, DType::kF32)->Apply(args);
BENCHMARK_CAPTURE(BM_DecodeAttention, bfloat16, DType::kBF16)->Apply(args);
BENCHMARK_CAPTURE(BM_DecodeAttention, fp8_e4m3, DType::kF8E4M3)->Apply(args);
BENCHMARK_CAPTURE(BM_DecodeAttention, fp8_e5m2, DType::kF8E5M2)->Apply(args);

}  // namespace
}  // namespace qs

BENCHMARK_MAIN();
