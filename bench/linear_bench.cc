// Kernel lab for ops::linear: every ISA variant at the Qwen2.5-0.5B and TinyLlama-1.1B
// weight shapes, decode (m = 1) and prefill (m = 512), 1 and 2 threads, plus the memory
// read bandwidth that bounds decode. Counters: GB/s of weight bytes, GFLOP/s (2 m n k).
// Decode cases rotate over enough copies of the weights to overflow the 32 MiB L3, so they
// measure DRAM like a real model does. Run: build/linear_bench --benchmark_filter=...
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/resident_arena.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "ops/linear.h"

namespace qs {
namespace {

using kernels::Isa;

struct Shape {
  const char* name;
  int64_t n, k;
};

// [n, k] as nn.Linear stores them (out_features, in_features).
constexpr Shape kQwen05B[] = {
    {"qwen0.5b_q_o", 896, 896},        {"qwen0.5b_kv", 128, 896},
    {"qwen0.5b_gate_up", 4864, 896},   {"qwen0.5b_down", 896, 4864},
    {"qwen0.5b_lm_head", 151936, 896},
};
constexpr Shape kTinyLlama[] = {
    {"tinyllama_q_o", 2048, 2048},      {"tinyllama_kv", 256, 2048},
    {"tinyllama_gate_up", 5632, 2048},  {"tinyllama_down", 2048, 5632},
    {"tinyllama_lm_head", 32000, 2048},
};

Tensor random_weights(DType dtype, int64_t n, int64_t k, uint32_t seed) {
  Tensor w = Tensor::zeros(dtype, {n, k});
  uint32_t s = seed * 2654435761u + 1;
  const int64_t count = n * k;
  for (int64_t i = 0; i < count; ++i) {
    s = s * 1664525u + 1013904223u;
    const float v = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) / (1 << 27);
    switch (dtype) {
      case DType::kF32:
        w.mutable_ptr<float>()[i] = v;
        break;
      case DType::kBF16:
        w.mutable_ptr<uint16_t>()[i] = f32_to_bf16(v);
        break;
      default:
        w.mutable_ptr<uint16_t>()[i] = f32_to_f16(v);
        break;
    }
  }
  return w;
}

std::vector<float> random_activations(int64_t count) {
  std::vector<float> x(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) x[i] = static_cast<float>((i * 37) % 101 - 50) / 64.0f;
  return x;
}

// Copies of one weight matrix to cycle through so the working set exceeds the L3.
int copies_for(int64_t m, size_t bytes) {
  if (m > 8) return 1;  // prefill reuses each weight m times; the cache is not the question
  constexpr size_t kWorkingSet = size_t{256} << 20;
  return static_cast<int>(std::max<size_t>(1, (kWorkingSet + bytes - 1) / bytes));
}

void bm_linear(benchmark::State& state, Isa isa, DType dtype, Shape shape, int64_t m, int threads) {
  const size_t w_bytes = static_cast<size_t>(shape.n * shape.k) * dtype_size(dtype);
  std::vector<Tensor> ws;
  for (int c = 0; c < copies_for(m, w_bytes); ++c)
    ws.push_back(random_weights(dtype, shape.n, shape.k, static_cast<uint32_t>(c)));
  const std::vector<float> x = random_activations(m * shape.k);
  std::vector<float> y(static_cast<size_t>(m * shape.n));
  ThreadPool pool(threads);
  size_t next = 0;
  for (auto _ : state) {
    const Status st = ops::linear_with_isa(isa, x.data(), m, ws[next], nullptr, y.data(), pool);
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % ws.size();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(iters * static_cast<double>(w_bytes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      iters * 2.0 * static_cast<double>(m * shape.n * shape.k) / 1e9, benchmark::Counter::kIsRate);
}

// A whole Qwen2.5-0.5B forward's matmuls (bf16): 24 layers of q, k, v, o, gate, up, down on
// m rows, then the lm_head on the last row only, as an engine computes logits for the last
// prompt position. tokens/s for decode (m = 1, weights streamed from DRAM) and for a
// 512-token prefill. Attention itself (scores, softmax) is not included.
void bm_qwen_model(benchmark::State& state, Isa isa, int64_t m, int threads) {
  std::vector<Tensor> ws;
  for (int layer = 0; layer < 24; ++layer) {
    for (const Shape& s : {kQwen05B[0], kQwen05B[1], kQwen05B[1], kQwen05B[0], kQwen05B[2],
                           kQwen05B[2], kQwen05B[3]})
      ws.push_back(random_weights(DType::kBF16, s.n, s.k, static_cast<uint32_t>(ws.size())));
  }
  const Tensor lm_head =
      random_weights(DType::kBF16, kQwen05B[4].n, kQwen05B[4].k, static_cast<uint32_t>(ws.size()));
  size_t bytes = lm_head.nbytes();
  double flops = 2.0 * static_cast<double>(lm_head.numel());
  for (const Tensor& w : ws) {
    bytes += w.nbytes();
    flops += 2.0 * static_cast<double>(m * w.numel());
  }
  const std::vector<float> x = random_activations(m * 4864);
  std::vector<float> y(static_cast<size_t>(std::max<int64_t>(m * 4864, 151936)));
  ThreadPool pool(threads);
  for (auto _ : state) {
    for (const Tensor& w : ws) {
      const Status st = ops::linear_with_isa(isa, x.data(), m, w, nullptr, y.data(), pool);
      if (!st.ok()) {
        state.SkipWithError(st.to_string().c_str());
        return;
      }
    }
    const Status st = ops::linear_with_isa(isa, x.data(), 1, lm_head, nullptr, y.data(), pool);
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["tokens/s"] =
      benchmark::Counter(iters * static_cast<double>(m), benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(iters * static_cast<double>(bytes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(iters * flops / 1e9, benchmark::Counter::kIsRate);
}

enum class SmallMKernel { kGemv, kGemm, kAmx, kPanels };

const char* small_m_name(SmallMKernel k) {
  switch (k) {
    case SmallMKernel::kGemv:
      return "gemv_avx512";
    case SmallMKernel::kGemm:
      return "gemm_avx512";
    case SmallMKernel::kAmx:
      return "amx_bf16";
    case SmallMKernel::kPanels:
      return "panels_avx512";
  }
  return "?";
}

// One kernel directly, one thread, over all n columns: the AVX-512 GEMV against the AVX-512
// GEMM, the AMX bf16 GEMM and the pair-panel kernel (on weights packed beforehand, as the
// loader packs them) at the small m of batched decode, to place the switches.
void bm_kernel_small_m(benchmark::State& state, SmallMKernel kernel, Shape shape, int64_t m) {
  const bool amx = kernel == SmallMKernel::kAmx;
  if (!kernels::isa_supported(Isa::kAvx512) || (amx && !kernels::amx_active())) {
    state.SkipWithError("needs AVX-512 (and AMX for the AMX case)");
    return;
  }
  const size_t w_bytes = static_cast<size_t>(shape.n * shape.k) * 2;
  std::vector<Tensor> ws;
  std::vector<std::shared_ptr<uint8_t[]>> panels;
  for (int c = 0; c < copies_for(1, w_bytes); ++c) {
    ws.push_back(random_weights(DType::kBF16, shape.n, shape.k, static_cast<uint32_t>(c)));
    if (kernel == SmallMKernel::kPanels) {
      panels.push_back(alloc_resident(
          static_cast<size_t>(kernels::cpu::pair_panel_elems(shape.n, shape.k)) * 2));
      kernels::cpu::pack_bf16_pair_panels(static_cast<const uint16_t*>(ws.back().data), shape.n,
                                          shape.k,
                                          reinterpret_cast<uint16_t*>(panels.back().get()));
      ws.back() = Tensor();  // only the panels are read
    }
  }
  const std::vector<float> x = random_activations(m * shape.k);
  std::vector<float> y(static_cast<size_t>(m * shape.n));
  // The GEMV and GEMM ops::linear runs under avx512.
  const kernels::cpu::LinearKernels& avx512 =
      kernels::cpu::linear_hwy(kernels::cpu::elementwise_hwy_target(Isa::kAvx512));
  size_t next = 0;
  for (auto _ : state) {
    const void* w = kernel == SmallMKernel::kPanels ? panels[next].get() : ws[next].data;
    const kernels::cpu::LinearArgs args{x.data(),     m,       shape.k, w,
                                        DType::kBF16, shape.n, nullptr, y.data()};
    switch (kernel) {
      case SmallMKernel::kGemv:
        avx512.gemv(args, 0, shape.n);
        break;
      case SmallMKernel::kGemm:
        avx512.gemm(args, 0, shape.n);
        break;
      case SmallMKernel::kAmx:
        kernels::cpu::linear_gemm_amx_bf16(args, 0, shape.n);
        break;
      case SmallMKernel::kPanels:
        kernels::cpu::linear_panels_bf16_avx512(args, 0, shape.n);
        break;
    }
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % ws.size();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(iters * static_cast<double>(w_bytes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      iters * 2.0 * static_cast<double>(m * shape.n * shape.k) / 1e9, benchmark::Counter::kIsRate);
}

// One kernel pair (GEMV below `gemm_min_rows`, GEMM from it on) of linear_hwy.cc called
// directly on one thread over all n columns, for each target ops::linear runs (the best one
// under avx512, the best 256-bit one under avx2). Run same-run interleaved
// (--benchmark_enable_random_interleaving=true) to compare targets or a candidate kernel.
struct KernelPair {
  std::string name;
  kernels::cpu::LinearKernel gemv, gemm;
  int64_t gemm_min_rows;
  bool supported;
};

std::vector<KernelPair> kernel_pairs() {
  std::vector<KernelPair> pairs;
  for (int64_t t : kernels::cpu::elementwise_hwy_targets()) {
    const std::string name = kernels::cpu::hwy_target_name(t);
    if (name != "AVX3_DL" && name != "AVX3" && name != "AVX2") continue;
    const kernels::cpu::LinearKernels& k = kernels::cpu::linear_hwy(t);
    pairs.push_back(
        {"hwy_" + name, k.gemv, k.gemm,
         name == "AVX2" ? kernels::cpu::kGemmMinRowsAvx2 : kernels::cpu::kGemmMinRowsAvx512,
         kernels::cpu::hwy_target_supported(t)});
  }
  return pairs;
}

// The weight copies of one (dtype, shape, copies), made once: interleaved repetitions set a
// benchmark up again each time, and 256 MiB of random weights take a while to make.
const std::vector<Tensor>& cached_weights(DType dtype, Shape shape, int copies) {
  static std::vector<std::pair<std::string, std::vector<Tensor>>> cache;
  const std::string key = std::string(dtype_name(dtype)) + shape.name + std::to_string(copies);
  for (const auto& [k, ws] : cache) {
    if (k == key) return ws;
  }
  std::vector<Tensor> ws;
  for (int c = 0; c < copies; ++c)
    ws.push_back(random_weights(dtype, shape.n, shape.k, static_cast<uint32_t>(c)));
  cache.emplace_back(key, std::move(ws));
  return cache.back().second;
}

void bm_kernel_pair(benchmark::State& state, KernelPair pair, DType dtype, Shape shape, int64_t m) {
  if (!pair.supported) {
    state.SkipWithError("this CPU lacks the target");
    return;
  }
  const size_t w_bytes = static_cast<size_t>(shape.n * shape.k) * dtype_size(dtype);
  const std::vector<Tensor>& ws = cached_weights(dtype, shape, copies_for(m, w_bytes));
  const std::vector<float> x = random_activations(m * shape.k);
  std::vector<float> y(static_cast<size_t>(m * shape.n));
  const kernels::cpu::LinearKernel kernel = m < pair.gemm_min_rows ? pair.gemv : pair.gemm;
  size_t next = 0;
  for (auto _ : state) {
    const kernels::cpu::LinearArgs args{x.data(), m,       shape.k, ws[next].data,
                                        dtype,    shape.n, nullptr, y.data()};
    kernel(args, 0, shape.n);
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % ws.size();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(iters * static_cast<double>(w_bytes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      iters * 2.0 * static_cast<double>(m * shape.n * shape.k) / 1e9, benchmark::Counter::kIsRate);
}

// The prefill GEMM on bf16 pair panels, on Highway's AVX-512 targets.
void bm_gemm_pairs(benchmark::State& state, int64_t target, Shape shape, int64_t m) {
  if (!kernels::cpu::hwy_target_supported(target)) {
    state.SkipWithError("this CPU lacks the target");
    return;
  }
  const kernels::cpu::LinearKernel kernel = kernels::cpu::linear_hwy(target).gemm_pairs;
  const Tensor& w = cached_weights(DType::kBF16, shape, 1)[0];
  const auto panels =
      alloc_resident(static_cast<size_t>(kernels::cpu::pair_panel_elems(shape.n, shape.k)) * 2);
  kernels::cpu::pack_bf16_pair_panels(static_cast<const uint16_t*>(w.data), shape.n, shape.k,
                                      reinterpret_cast<uint16_t*>(panels.get()));
  const std::vector<float> x = random_activations(m * shape.k);
  std::vector<float> y(static_cast<size_t>(m * shape.n));
  for (auto _ : state) {
    kernel({x.data(), m, shape.k, panels.get(), DType::kBF16, shape.n, nullptr, y.data()}, 0,
           shape.n);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 *
                             static_cast<double>(m * shape.n * shape.k) / 1e9,
                         benchmark::Counter::kIsRate);
}

void bm_bandwidth(benchmark::State& state, int threads) {
  ThreadPool pool(threads);
  double gbs = 0.0;
  for (auto _ : state) gbs = kernels::measure_read_bandwidth_gbs(pool, size_t{1} << 30, 3);
  state.counters["GB/s"] = gbs;
}

void register_all() {
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark(("read_bandwidth/threads:" + std::to_string(threads)).c_str(),
                                 bm_bandwidth, threads)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  for (const Shape& shape : {kQwen05B[0], kQwen05B[2], kQwen05B[3], kQwen05B[4], kTinyLlama[4]}) {
    // 128 and 512: whether the panels could serve prefill too (the GEMV is not run there).
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}, int64_t{16}, int64_t{32},
                      int64_t{64}, int64_t{128}, int64_t{512}}) {
      for (SmallMKernel kernel :
           {SmallMKernel::kGemv, SmallMKernel::kGemm, SmallMKernel::kAmx, SmallMKernel::kPanels}) {
        if (m > 64 && kernel == SmallMKernel::kGemv) continue;
        const std::string name = std::string("small_m/") + shape.name + "/" + small_m_name(kernel) +
                                 "/m:" + std::to_string(m);
        benchmark::RegisterBenchmark(name.c_str(), bm_kernel_small_m, kernel, shape, m)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
  // Decode (m = 1), batched decode (4, 16) and prefill (128; 512 on the small q/o) on the
  // Qwen2.5-0.5B blocks; f16 and f32 weights on gate/up.
  for (const Shape& shape : {kQwen05B[0], kQwen05B[2], kQwen05B[3]}) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      if (dtype != DType::kBF16 && shape.name != kQwen05B[2].name) continue;
      for (int64_t m : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{128}, int64_t{512}}) {
        if (m == 512 && shape.name != kQwen05B[0].name) continue;
        if (dtype != DType::kBF16 && m != 1 && m != 128) continue;
        for (const KernelPair& pair : kernel_pairs()) {
          const std::string name = std::string("kernel_pair/") + shape.name + "/" +
                                   dtype_name(dtype) + "/m:" + std::to_string(m) + "/" + pair.name;
          benchmark::RegisterBenchmark(name.c_str(), bm_kernel_pair, pair, dtype, shape, m)
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
    for (int64_t t : kernels::cpu::elementwise_hwy_targets()) {
      const std::string target = kernels::cpu::hwy_target_name(t);
      if (target != "AVX3_DL" && target != "AVX3") continue;
      const std::string name =
          std::string("gemm_pairs/") + shape.name + "/BF16/m:128/hwy_" + target;
      benchmark::RegisterBenchmark(name.c_str(), bm_gemm_pairs, t, shape, int64_t{128})
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
    if (!kernels::isa_supported(isa)) continue;
    for (int threads : {1, 2}) {
      // 8 to 64 find the GEMV -> GEMM switch (kernels::cpu::kGemmMinRows*).
      for (int64_t m :
           {int64_t{1}, int64_t{8}, int64_t{16}, int64_t{32}, int64_t{64}, int64_t{512}}) {
        if (isa == Isa::kRef && m > 1) continue;  // the oracle would take minutes
        const std::string suffix =
            "/m:" + std::to_string(m) + "/threads:" + std::to_string(threads);
        const std::string model = std::string("qwen0.5b_model/") + kernels::isa_name(isa) + "/BF16";
        benchmark::RegisterBenchmark((model + suffix).c_str(), bm_qwen_model, isa, m, threads)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
        for (const auto* shapes : {kQwen05B, kTinyLlama}) {
          for (int s = 0; s < 5; ++s) {
            for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
              const std::string name = std::string(shapes[s].name) + "/" + kernels::isa_name(isa) +
                                       "/" + dtype_name(dtype) + suffix;
              benchmark::RegisterBenchmark(name.c_str(), bm_linear, isa, dtype, shapes[s], m,
                                           threads)
                  ->Unit(benchmark::kMillisecond)
                  ->UseRealTime();
            }
          }
        }
      }
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
