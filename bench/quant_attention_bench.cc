// Kernel lab for the quantizer's calibration attention (quant::attention_forward, float, bf16
// products, plain causal): the fused kernel (ops::causal_attention_bf16) against the per-block
// GEMM path it replaced (AttentionShape::fused_bf16 = false), at SmolLM2-135M's attention
// (9 heads, 3 kv heads, head_dim 64), one sequence of 512 and of 2048 tokens, 1 and 2 threads.
// Counter: GFLOP/s of the causal products (2 x 2 x heads x n (n + 1) / 2 x head_dim).
// Run: build/bench/quant_attention_bench --benchmark_enable_random_interleaving=true
//        --benchmark_repetitions=5 (interleaved, so that both paths see the same load)
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/causal_attention.h"
#include "ops/gemm.h"
#include "quant/grad_ops.h"

namespace qs {
namespace {

constexpr int64_t kHeads = 9, kKvHeads = 3, kHeadDim = 64;

void BM_CalibrationAttention(benchmark::State& state, bool fused) {
  if (fused && !ops::causal_attention_bf16_runs(kHeadDim)) {
    state.SkipWithError("no fused kernel on this CPU (AVX512-BF16)");
    return;
  }
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  std::mt19937 rng(1);
  std::normal_distribution<float> noise;
  std::vector<float> q(n * kHeads * kHeadDim), k(n * kKvHeads * kHeadDim), v(k.size());
  for (float& x : q) x = noise(rng);
  for (float& x : k) x = noise(rng);
  for (float& x : v) x = noise(rng);
  std::vector<float> out(q.size()), lse(kHeads * n);
  quant::AttentionShape s{1,
                          n,
                          kHeads,
                          kKvHeads,
                          kHeadDim,
                          0,
                          1.0 / std::sqrt(static_cast<double>(kHeadDim)),
                          ops::Products::kBf16};
  s.fused_bf16 = fused;
  ThreadPool pool(threads);
  for (auto _ : state) {
    quant::attention_forward<float>(s, q.data(), k.data(), v.data(), nullptr, out.data(),
                                    lse.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 4.0 * kHeads * static_cast<double>(n * (n + 1) / 2) * kHeadDim;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void args(benchmark::internal::Benchmark* b) {
  for (const int64_t n : {512, 2048})
    for (const int64_t threads : {1, 2}) b->Args({n, threads});
  b->ArgNames({"seqlen", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_CalibrationAttention, gemm_blocks, false)->Apply(args);
BENCHMARK_CAPTURE(BM_CalibrationAttention, fused, true)->Apply(args);

}  // namespace
}  // namespace qs

BENCHMARK_MAIN();
