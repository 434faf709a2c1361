// Kernel lab for the per-token ops (kernels/cpu/elementwise_cpu.h): the Highway source on each
// of its targets this CPU has that the ops could run, at the shapes the models run
// (Qwen2.5-0.5B: hidden 896, MLP 4864, 14 heads of 64; 2048-wide norms; 512- and 4096-long
// score rows; Whisper's 1536-wide GELU), one token and 128 at once. Single thread.
// docs/kernels.md ("Written once: Highway") compares it with the hand-written kernels it
// replaced. Run: build/bench/elementwise_bench --benchmark_repetitions=21
//   --benchmark_min_time=0.02 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"

namespace qs {
namespace {

using kernels::cpu::ElementwiseKernels;

// Every buffer starts on a 64-byte line, as core/tensor.cc allocates the models' tensors,
// wherever the allocator put it: a 512-bit load that straddles two lines costs more, and
// variants must not differ by their buffers' luck.
class Floats {
 public:
  explicit Floats(size_t n) : store_(n + 16) {
    void* p = store_.data();
    size_t space = store_.size() * sizeof(float);
    data_ = static_cast<float*>(std::align(64, n * sizeof(float), p, space));
    size_ = n;
  }
  // A moved vector keeps its storage, so data_ stays right; a copy would not.
  Floats(Floats&&) = default;
  Floats(const Floats&) = delete;
  float* data() { return data_; }
  const float* data() const { return data_; }
  float& operator[](size_t i) { return data_[i]; }
  size_t size() const { return size_; }

 private:
  std::vector<float> store_;
  float* data_ = nullptr;
  size_t size_ = 0;
};

Floats random_vector(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Floats v(n);
  for (size_t i = 0; i < n; ++i) v[i] = normal(rng);
  return v;
}

void set_bytes(benchmark::State& state, double bytes_per_call) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes_per_call * state.iterations()));
}

void rms_norm(benchmark::State& state, ElementwiseKernels k, int64_t m, int64_t d) {
  const Floats x = random_vector(m * d, 1, 2.0f), w = random_vector(d, 2, 1.0f);
  Floats y(x.size());
  for (auto _ : state) {
    k.rms_norm(x.data(), m, d, w.data(), 1e-6f, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_bytes(state, 8.0 * m * d);
}

void silu_mul(benchmark::State& state, ElementwiseKernels k, int64_t n) {
  const Floats g = random_vector(n, 1, 4.0f), up = random_vector(n, 2, 1.0f);
  Floats out(g.size());
  for (auto _ : state) {
    k.silu_mul(g.data(), up.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, 12.0 * n);
}

// Rotation keeps the vectors' norms, so rotating the same buffer again and again is stable.
void rope(benchmark::State& state, ElementwiseKernels k, int64_t n_tokens) {
  constexpr int64_t kHeads = 14, kHeadDim = 64, kHalf = kHeadDim / 2;
  Floats x = random_vector(n_tokens * kHeads * kHeadDim, 1, 1.0f);
  Floats cos(n_tokens * kHalf), sin(cos.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t j = 0; j < kHalf; ++j) {
      const double angle = (t + 7) * std::pow(10000.0, -2.0 * j / kHeadDim);
      cos[t * kHalf + j] = static_cast<float>(std::cos(angle));
      sin[t * kHalf + j] = static_cast<float>(std::sin(angle));
    }
  }
  for (auto _ : state) {
    k.rope_rotate_half(x.data(), n_tokens, kHeads, kHeadDim, cos.data(), sin.data());
    benchmark::DoNotOptimize(x.data());
  }
  set_bytes(state, 4.0 * n_tokens * (2 * kHeads * kHeadDim + kHeadDim));
}

// Softmax of a probability row is again one (towards uniform): no denormals on repeat.
void softmax(benchmark::State& state, ElementwiseKernels k, int64_t n) {
  Floats x = random_vector(n, 1, 5.0f);
  for (auto _ : state) {
    k.softmax(x.data(), n);
    benchmark::DoNotOptimize(x.data());
  }
  set_bytes(state, 8.0 * n);
}

void exp_sub(benchmark::State& state, ElementwiseKernels k, int64_t n) {
  const Floats x = random_vector(n, 1, 5.0f);
  Floats out(x.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(k.exp_sub(x.data(), n, 4.0f, out.data()));
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, 8.0 * n);
}

void add_inplace(benchmark::State& state, ElementwiseKernels k, int64_t n) {
  const Floats x = random_vector(n, 1, 1.0f);
  Floats y = random_vector(n, 2, 1.0f);
  for (auto _ : state) {
    k.add_inplace(y.data(), x.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  set_bytes(state, 12.0 * n);
}

// GELU again on its own output would shrink negatives into denormals, so each call starts
// from a fresh copy, made outside the timed region.
void gelu_erf(benchmark::State& state, ElementwiseKernels k, int64_t n) {
  const Floats src = random_vector(n, 1, 2.0f);
  Floats x(src.size());
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(x.data(), src.data(), src.size() * sizeof(float));
    state.ResumeTiming();
    k.gelu_erf(x.data(), n);
    benchmark::DoNotOptimize(x.data());
  }
  set_bytes(state, 8.0 * n);
}

struct Variant {
  std::string name;
  ElementwiseKernels ops;
};

// The Highway targets this CPU has that the ops could pick (SSE4 and below only matter on
// CPUs without AVX2, where the ops run the scalar oracle).
std::vector<Variant> variants() {
  std::vector<Variant> all;
  const int64_t worst = kernels::cpu::elementwise_hwy_target(kernels::Isa::kAvx2);
  for (int64_t target : kernels::cpu::elementwise_hwy_targets()) {
    // Lower bits are better targets.
    if (target > worst || !kernels::cpu::hwy_target_supported(target)) continue;
    all.push_back({kernels::cpu::hwy_target_name(target), kernels::cpu::elementwise_hwy(target)});
  }
  return all;
}

void register_all() {
  for (const Variant& v : variants()) {
    const ElementwiseKernels k = v.ops;
    const auto reg = [&](const std::string& what, auto fn, auto... shape) {
      benchmark::RegisterBenchmark((what + "/" + v.name).c_str(), fn, k, shape...);
    };
    for (int64_t d : {896, 2048}) {
      for (int64_t m : {1, 128})
        reg("rms_norm/m" + std::to_string(m) + "_d" + std::to_string(d), rms_norm, m, d);
    }
    for (int64_t n : {4864, 128 * 4864}) reg("silu_mul/n" + std::to_string(n), silu_mul, n);
    for (int64_t t : {1, 128}) reg("rope/14x64_t" + std::to_string(t), rope, t);
    for (int64_t n : {512, 4096}) {
      reg("softmax/n" + std::to_string(n), softmax, n);
      reg("exp_sub/n" + std::to_string(n), exp_sub, n);
    }
    reg("add_inplace/n" + std::to_string(896 * 128), add_inplace, int64_t{896 * 128});
    reg("gelu_erf/n" + std::to_string(1536 * 128), gelu_erf, int64_t{1536 * 128});
  }
}

}  // namespace
}  // namespace qs

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  qs::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
