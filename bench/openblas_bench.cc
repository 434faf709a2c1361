// The yardstick for our GEMM: OpenBLAS cblas_sgemm at the Qwen2.5-0.5B prefill shapes
// (m = 512), on weights already converted to f32 (so this is an upper bound for the
// "convert a panel, call sgemm" design: the conversion is not timed), next to
// ops::linear on the bf16 weights. Counters: GFLOP/s (2 m n k).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "ops/linear.h"

namespace qs {
namespace {

struct Shape {
  const char* name;
  int64_t n, k;
};

constexpr Shape kShapes[] = {
    {"qwen0.5b_q_o", 896, 896}, {"qwen0.5b_gate_up", 4864, 896}, {"qwen0.5b_down", 896, 4864}};
constexpr int64_t kRows = 512;

std::vector<float> pattern(int64_t count, int salt) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<float>((i * 37 + salt) % 101 - 50) / 64.0f;
  return v;
}

void set_flops(benchmark::State& state, const Shape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * static_cast<double>(kRows * s.n * s.k) / 1e9,
      benchmark::Counter::kIsRate);
}

void bm_sgemm(benchmark::State& state, Shape s, int threads) {
  openblas_set_num_threads(threads);
  const std::vector<float> x = pattern(kRows * s.k, 1), w = pattern(s.n * s.k, 2);
  std::vector<float> y(static_cast<size_t>(kRows * s.n));
  for (auto _ : state) {
    // y[m, n] = x[m, k] @ w[n, k]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(kRows),
                static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, x.data(), static_cast<int>(s.k),
                w.data(), static_cast<int>(s.k), 0.0f, y.data(), static_cast<int>(s.n));
    benchmark::DoNotOptimize(y.data());
  }
  set_flops(state, s);
}

void bm_ours(benchmark::State& state, Shape s, int threads) {
  const std::vector<float> x = pattern(kRows * s.k, 1);
  const Tensor w = Tensor::from_f32(DType::kBF16, {s.n, s.k}, pattern(s.n * s.k, 2));
  std::vector<float> y(static_cast<size_t>(kRows * s.n));
  ThreadPool pool(threads);
  for (auto _ : state) {
    const Status st = ops::linear(x.data(), kRows, w, nullptr, y.data(), pool);
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(y.data());
  }
  set_flops(state, s);
}

void register_all() {
  for (int threads : {1, 2}) {
    for (const Shape& s : kShapes) {
      const std::string suffix = std::string(s.name) + "/m:512/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(("openblas_sgemm_f32/" + suffix).c_str(), bm_sgemm, s, threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark((std::string("ops_linear_bf16_") +
                                    kernels::isa_name(kernels::active_isa()) + "/" + suffix)
                                       .c_str(),
                                   bm_ours, s, threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace qs

int main(int argc, char** argv) {
  qs::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
