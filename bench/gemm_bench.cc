// Kernel lab for ops::gemm, the f32 GEMM of AutoRound's backward (quant/): every ISA variant
// at the Qwen2.5-0.5B linear shapes for 512 tokens and at the tuner's own (a Qwen3-0.6B block
// on one mini-batch: 8 samples x 512 tokens, as bench_quantize_vs_autoround.sh runs it), both
// products the backward needs (dX = dY W: A plain; dW = dY^T X: A transposed), 1 and 2 threads,
// next to ops::linear's forward GEMM on the same shape as the yardstick; and the forward x W^T
// as a gemm (B = W^T through its strides), each with f32 and with bf16 products (ops::Products;
// SmolLM2-135M shapes are the OPT-RTN calibration forward's). The hwy_<target> variants call the
// Highway f32 kernel of every compiled target directly, so targets compare in one run.
// Counter: GFLOP/s (2 m n k).
// Run: build/gemm_bench --benchmark_filter=...
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"
#include "ops/gemm.h"
#include "ops/linear.h"

namespace qs {
namespace {

using kernels::Isa;

struct Shape {
  const char* name;
  int64_t n, k;    // the linear's weight [n, k]
  int64_t tokens;  // m
};

constexpr Shape kShapes[] = {{"qwen0.5b_q_o", 896, 896, 512},
                             {"qwen0.5b_gate_up", 4864, 896, 512},
                             {"qwen0.5b_down", 896, 4864, 512},
                             {"tuner_qwen3_0.6b_q", 2048, 1024, 4096},
                             {"tuner_qwen3_0.6b_kv", 1024, 1024, 4096},
                             {"tuner_qwen3_0.6b_o", 1024, 2048, 4096},
                             {"tuner_qwen3_0.6b_gate_up", 3072, 1024, 4096},
                             {"tuner_qwen3_0.6b_down", 1024, 3072, 4096},
                             {"smollm2_q_o", 576, 576, 4096},
                             {"smollm2_kv", 192, 576, 4096},
                             {"smollm2_gate_up", 1536, 576, 4096},
                             {"smollm2_down", 576, 1536, 4096}};

std::vector<float> filled(int64_t count, uint32_t seed) {
  std::vector<float> v(count);
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) / (1 << 27);
  }
  return v;
}

enum class Product { kInputGrad, kWeightGrad, kForward, kGemmForward };

struct Operands {
  std::vector<float> x, w, dy, out;
  kernels::GemmArgs args{};
};

Operands operands(Shape shape, Product product) {
  Operands o;
  const int64_t m = shape.tokens, n = shape.n, k = shape.k;
  o.x = filled(m * k, 1);
  o.w = filled(n * k, 2);
  o.dy = filled(m * n, 3);
  o.out.resize(product == Product::kWeightGrad ? n * k
                                               : (product == Product::kInputGrad ? m * k : m * n));
  if (product == Product::kInputGrad) {  // dX[m, k] = dY[m, n] W[n, k]
    o.args = ops::gemm_args(o.dy.data(), false, o.w.data(), o.out.data(), m, k, n, false);
  } else if (product == Product::kWeightGrad) {  // dW[n, k] = dY^T[n, m] X[m, k]
    o.args = ops::gemm_args(o.dy.data(), true, o.x.data(), o.out.data(), n, k, m, false);
  } else if (product == Product::kGemmForward) {  // Y[m, n] = X[m, k] W^T: B(p, j) = w[j k + p]
    o.args = ops::gemm_args(o.x.data(), false, o.w.data(), o.out.data(), m, n, k, false);
    o.args.ldb = 1;
    o.args.b_col_stride = k;
  }
  return o;
}

// The Highway kernel of one target, called directly (f32 products; B read through its strides,
// where ops::gemm copies a transposed B first), each thread with its own scratch.
void run_hwy(benchmark::State& state, int64_t target, Shape shape, Product product, int threads) {
  if (!kernels::cpu::hwy_target_supported(target)) {
    state.SkipWithError("Highway target not supported on this CPU");
    return;
  }
  ThreadPool pool(threads);
  Operands o = operands(shape, product);
  const kernels::GemmArgs& g = o.args;
  const kernels::cpu::GemmF32Kernel kernel = kernels::cpu::gemm_f32_hwy(target);
  const auto floats = static_cast<size_t>(kernels::cpu::gemm_f32_hwy_scratch_floats(g));
  for (auto _ : state) {
    pool.parallel_for(
        g.m,
        [&](int64_t begin, int64_t end) {
          thread_local std::vector<float> scratch;
          if (scratch.size() < floats) scratch.resize(floats);
          kernel(g, begin, end, scratch.data());
        },
        kernels::cpu::kGemmRowGrain);
    benchmark::DoNotOptimize(o.out.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * shape.tokens * shape.n * shape.k * state.iterations() / 1e9,
                         benchmark::Counter::kIsRate);
}

void run(benchmark::State& state, Isa isa, Shape shape, Product product, ops::Products products,
         int threads) {
  if (!kernels::isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  ThreadPool pool(threads);
  const int64_t m = shape.tokens, n = shape.n, k = shape.k;
  Operands o = operands(shape, product);
  const std::vector<float>&x = o.x, &w = o.w;
  std::vector<float>& out = o.out;
  const kernels::GemmArgs& args = o.args;
  Tensor wt;
  wt.dtype = DType::kF32;
  wt.shape = {n, k};
  wt.data = const_cast<float*>(w.data());
  for (auto _ : state) {
    const Status st = product == Product::kForward
                          ? ops::linear_with_isa(isa, x.data(), m, wt, nullptr, out.data(), pool)
                          : ops::gemm_with_isa(isa, args, &pool, products);
    if (!st.ok()) state.SkipWithError(st.message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void register_all() {
  const std::pair<Product, const char*> kinds[] = {{Product::kInputGrad, "dX=dY*W"},
                                                   {Product::kWeightGrad, "dW=dYT*X"},
                                                   {Product::kForward, "linear_fwd"},
                                                   {Product::kGemmForward, "gemm_fwd"}};
  for (const Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
    for (const Shape& shape : kShapes) {
      for (const auto& [product, label] : kinds) {
        for (const ops::Products products : {ops::Products::kF32, ops::Products::kBf16}) {
          if (product == Product::kForward && products == ops::Products::kBf16) continue;
          for (const int threads : {1, 2}) {
            if (isa == Isa::kRef && threads == 2) continue;
            const std::string name = std::string("gemm/") + kernels::isa_name(isa) + "/" +
                                     shape.name + "/" + label + "/" + ops::products_name(products) +
                                     "/t" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
              run(s, isa, shape, product, products, threads);
            })->Unit(benchmark::kMillisecond);
          }
        }
      }
    }
  }
  for (const int64_t target : kernels::cpu::elementwise_hwy_targets()) {
    for (const Shape& shape : kShapes) {
      for (const auto& [product, label] : kinds) {
        if (product == Product::kForward) continue;
        for (const int threads : {1, 2}) {
          const std::string name = std::string("gemm/hwy_") +
                                   kernels::cpu::hwy_target_name(target) + "/" + shape.name + "/" +
                                   label + "/f32/t" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
            run_hwy(s, target, shape, product, threads);
          })->Unit(benchmark::kMillisecond);
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
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
