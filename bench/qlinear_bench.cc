// Kernel lab for ops::linear on quantized weights: int4 g128 (symmetric), int8 per-channel and
// fp8 e4m3 (per-channel and 128x128 blocks; weight-only, bf16 activations)
// at the Qwen2.5-0.5B shapes, every SIMD ISA, against the bf16 dense kernel on the same shape;
// decode (m = 1, weights rotated over copies that overflow the 32 MiB L3, so DRAM is
// measured), the GEMV/GEMM crossover (m = 4..32) and prefill (m = 128); 1 and 2 threads.
// Counters: GB/s of resident weight bytes, GFLOP/s (2 m n k). `qkernel/<set>/...` and
// `qquant/<set>/...` call the int8-activation kernels directly, one thread: each x86 Highway
// target of the qlinear_*_hwy.cc sources (hwy_<TARGET>) and the hand-written AVX-512 GEMV
// (with the quantizer ops::linear runs beside them), for same-run comparisons
// (--benchmark_enable_random_interleaving=true). Run:
//   build/qlinear_bench --benchmark_filter=... (see docs/kernels.md)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/qmatrix.h"
#include "ops/linear.h"
#include "ops/quant_matrix.h"

namespace qs {
namespace {

using kernels::Isa;

struct Shape {
  const char* name;
  int64_t n, k;
};

// [n, k] as nn.Linear stores them.
constexpr Shape kQwen05B[] = {
    {"qwen0.5b_q_o", 896, 896},
    {"qwen0.5b_kv", 128, 896},
    {"qwen0.5b_gate_up", 4864, 896},
    {"qwen0.5b_down", 896, 4864},
};

enum class Format { kBf16, kInt4G128, kInt4G32, kInt8Channel, kFp8Channel, kFp8Block };

const char* format_name(Format f) {
  switch (f) {
    case Format::kBf16:
      return "bf16";
    case Format::kInt4G128:
      return "int4_g128_sym";
    case Format::kInt4G32:
      return "int4_g32_sym";
    case Format::kInt8Channel:
      return "int8_per_channel_sym";
    case Format::kFp8Channel:
      return "fp8_per_channel";
    case Format::kFp8Block:
      return "fp8_block128";
  }
  return "?";
}

uint32_t next(uint32_t& s) {
  s = s * 1664525u + 1013904223u;
  return s >> 8;
}

ops::LinearWeight make_weight(Format f, const Shape& shape, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  if (f == Format::kBf16) {
    Tensor w = Tensor::zeros(DType::kBF16, {shape.n, shape.k});
    for (int64_t i = 0; i < shape.n * shape.k; ++i) {
      w.mutable_ptr<uint16_t>()[i] =
          f32_to_bf16(static_cast<float>(static_cast<int32_t>(next(s) % 2001) - 1000) / 16000.0f);
    }
    return w;
  }
  formats::QuantizedWeight q;
  q.n = shape.n;
  q.k = shape.k;
  if (f == Format::kFp8Channel || f == Format::kFp8Block) {
    // Finite e4m3 codes (0x7F / 0xFF are NaN).
    q.bits = 8;
    q.code_type = formats::CodeType::kFp8E4m3;
    q.group_size = f == Format::kFp8Block ? 128 : shape.k;
    q.codes.resize(static_cast<size_t>(q.n * q.k));
    for (uint8_t& c : q.codes) c = static_cast<uint8_t>(next(s) % 0x7F) | (next(s) & 0x80);
    q.scales.resize(static_cast<size_t>(q.n * q.n_groups()));
    for (float& v : q.scales) v = static_cast<float>(next(s) % 1000 + 1) / 1e5f;
    q.zeros.assign(q.scales.size(), 0);
    formats::QuantScheme scheme;
    scheme.layout = formats::Layout::kFp8;
    scheme.bits = 8;
    scheme.group_size = f == Format::kFp8Block ? 128 : -1;
    auto made = ops::QuantMatrix::make(scheme, q);
    if (!made.ok()) return {};
    return ops::LinearWeight(*made);
  }
  const bool int4 = f == Format::kInt4G128 || f == Format::kInt4G32;
  const int64_t group = f == Format::kInt4G128 ? 128 : 32;
  q.bits = int4 ? 4 : 8;
  q.group_size = int4 ? group : shape.k;
  q.codes.resize(static_cast<size_t>(q.n * q.k));
  for (uint8_t& c : q.codes) c = static_cast<uint8_t>(next(s) % (1u << q.bits));
  q.scales.resize(static_cast<size_t>(q.n * q.n_groups()));
  for (float& v : q.scales) v = static_cast<float>(next(s) % 1000 + 1) / 1e5f;
  q.zeros.assign(q.scales.size(), 1 << (q.bits - 1));
  formats::QuantScheme scheme;
  scheme.layout = formats::Layout::kGptq;
  scheme.bits = q.bits;
  scheme.group_size = int4 ? group : -1;
  auto made = ops::QuantMatrix::make(scheme, q);
  if (!made.ok()) return {};
  return ops::LinearWeight(*made);
}

// Copies of one weight to cycle through so that the working set exceeds the L3, as a model's
// does: decode and batched decode (up to 32 rows, a server's running batch) read every weight
// from DRAM once per step. Prefill reuses each weight m times; the cache is not the question.
int copies_for(int64_t m, size_t bytes) {
  if (m > 32) return 1;
  constexpr size_t kWorkingSet = size_t{256} << 20;
  return static_cast<int>(std::max<size_t>(1, (kWorkingSet + bytes - 1) / bytes));
}

void bm_qlinear(benchmark::State& state, Isa isa, Format f, Shape shape, int64_t m, int threads) {
  std::vector<ops::LinearWeight> ws{make_weight(f, shape, 0)};
  if (ws[0].empty()) {
    state.SkipWithError("QuantMatrix::make failed");
    return;
  }
  const size_t bytes = ws[0].resident_bytes();
  for (int c = 1; c < copies_for(m, bytes); ++c) {
    ws.push_back(make_weight(f, shape, static_cast<uint32_t>(c)));
  }
  std::vector<float> x(static_cast<size_t>(m * shape.k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i * 37 % 101) / 64.0f - 0.78f;
  std::vector<float> y(static_cast<size_t>(m * shape.n));
  ThreadPool pool(threads);
  size_t at = 0;
  for (auto _ : state) {
    const Status st = ops::linear_with_isa(isa, x.data(), m, ws[at], nullptr, y.data(), pool);
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(y.data());
    at = (at + 1) % ws.size();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(iters * static_cast<double>(bytes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      iters * 2.0 * static_cast<double>(m * shape.n * shape.k) / 1e9, benchmark::Counter::kIsRate);
}

// One kernel set of the int8-activation path, called directly on one thread (quantize x,
// then the GEMV below kQGemmMinRows rows, the GEMM from there, as ops::linear picks): the
// hand-written kernels and each Highway target's side by side, for same-run comparisons.
struct KernelVariant {
  std::string name;
  kernels::cpu::QLinearKernels k;
};

std::vector<KernelVariant> kernel_variants() {
  std::vector<KernelVariant> v;
#if QS_X86
  // The hand-written GEMV has no GEMM of its own (gemm null: no m >= kQGemmMinRows rows).
  const auto quantizer = [](Isa isa) {
    return kernels::cpu::qlinear_hwy(kernels::cpu::elementwise_hwy_target(isa)).quantize_acts;
  };
  if (kernels::isa_supported(Isa::kAvx512)) {
    v.push_back({"avx512", {kernels::cpu::qlinear_gemv_avx512, nullptr, quantizer(Isa::kAvx512)}});
  }
#endif
  for (int64_t t : kernels::cpu::elementwise_hwy_targets()) {
    // The targets ops::linear runs on x86 (elementwise_hwy_target of avx512 and avx2).
    const std::string name = kernels::cpu::hwy_target_name(t);
    if (!kernels::cpu::hwy_target_supported(t) ||
        (name != "AVX3_DL" && name != "AVX3" && name != "AVX2")) {
      continue;
    }
    v.push_back({"hwy_" + name, kernels::cpu::qlinear_hwy(t)});
  }
  return v;
}

// The copies bm_qkernel cycles through, made once per format, shape and count: interleaved
// repetitions run each benchmark many times, and making 128 MiB of weights each time would
// take longer than timing them. 128 MiB (4x the L3) still sends decode to DRAM.
const std::vector<ops::LinearWeight>& cached_weights(Format f, const Shape& shape, int64_t m) {
  static std::map<std::string, std::vector<ops::LinearWeight>> cache;
  const ops::LinearWeight first = make_weight(f, shape, 0);
  if (first.empty()) return cache[""];
  const size_t bytes = first.resident_bytes();
  constexpr size_t kWorkingSet = size_t{128} << 20;
  const size_t copies = m > 32 ? 1 : std::max<size_t>(1, (kWorkingSet + bytes - 1) / bytes);
  std::vector<ops::LinearWeight>& ws =
      cache[std::string(shape.name) + "/" + format_name(f) + "/" + std::to_string(copies)];
  if (ws.empty()) {
    ws.push_back(first);
    for (size_t c = 1; c < copies; ++c) {
      ws.push_back(make_weight(f, shape, static_cast<uint32_t>(c)));
    }
  }
  return ws;
}

void bm_qkernel(benchmark::State& state, kernels::cpu::QLinearKernels k, Format f, Shape shape,
                int64_t m) {
  const std::vector<ops::LinearWeight>& ws = cached_weights(f, shape, m);
  if (ws.empty() || ws[0].quant == nullptr || !ws[0].quant->packed()) {
    state.SkipWithError("QuantMatrix::make failed");
    return;
  }
  const size_t bytes = ws[0].resident_bytes();
  std::vector<float> x(static_cast<size_t>(m * shape.k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i * 37 % 101) / 64.0f - 0.78f;
  std::vector<float> y(static_cast<size_t>(m * shape.n));
  const size_t acts_bytes = kernels::qacts_bytes(ws[0].quant->view(), m);
  std::unique_ptr<void, decltype(&std::free)> acts(
      std::aligned_alloc(64, (acts_bytes + 63) / 64 * 64), &std::free);
  const auto kernel = m >= kernels::cpu::kQGemmMinRows ? k.gemm : k.gemv;
  size_t at = 0;
  for (auto _ : state) {
    const kernels::QMatrixView& w = ws[at].quant->view();
    const kernels::QActsView a = k.quantize_acts(w, x.data(), m, acts.get());
    kernel({&w, &a, nullptr, y.data()}, 0, shape.n);
    benchmark::DoNotOptimize(y.data());
    at = (at + 1) % ws.size();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(iters * static_cast<double>(bytes) / 1e9, benchmark::Counter::kIsRate);
}

// quantize_acts alone, for the kernel sets above: x [m, k] for a g128 weight of width k.
void bm_quantize(benchmark::State& state, kernels::cpu::QLinearKernels k, Shape shape, int64_t m) {
  const ops::LinearWeight w = make_weight(Format::kInt4G128, shape, 0);
  if (w.quant == nullptr || !w.quant->packed()) {
    state.SkipWithError("QuantMatrix::make failed");
    return;
  }
  const kernels::QMatrixView& view = w.quant->view();
  std::vector<float> x(static_cast<size_t>(m * shape.k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i * 37 % 101) / 64.0f - 0.78f;
  const size_t acts_bytes = kernels::qacts_bytes(view, m);
  std::unique_ptr<void, decltype(&std::free)> acts(
      std::aligned_alloc(64, (acts_bytes + 63) / 64 * 64), &std::free);
  for (auto _ : state) {
    const kernels::QActsView a = k.quantize_acts(view, x.data(), m, acts.get());
    benchmark::DoNotOptimize(a.q);
  }
}

void bm_bandwidth(benchmark::State& state, int threads) {
  ThreadPool pool(threads);
  kernels::ReadBandwidth bw;
  for (auto _ : state) bw = kernels::measure_read_bandwidth_variants(pool);
  // GB/s is the probe (the best variant); the others let a reader check it against a plain
  // 512-bit streaming sum (avx512) and the old 128-bit probe (sse2).
  state.counters["GB/s"] = bw.best();
  state.counters["sse2"] = bw.sse2;
  state.counters["avx512"] = bw.avx512;
  state.counters["avx512_prefetch"] = bw.avx512_prefetch;
}

void register_all() {
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark(("read_bandwidth/threads:" + std::to_string(threads)).c_str(),
                                 bm_bandwidth, threads)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  for (const KernelVariant& v : kernel_variants()) {
    const bool hand_gemv = v.k.gemm == nullptr;  // its quantizer is a Highway target's
    for (int64_t m : {int64_t{1}, int64_t{64}}) {
      if (hand_gemv) break;
      for (const Shape& shape : {kQwen05B[0], kQwen05B[3]}) {  // k = 896, 4864
        const std::string name =
            "qquant/" + v.name + "/k:" + std::to_string(shape.k) + "/m:" + std::to_string(m);
        benchmark::RegisterBenchmark(name.c_str(), bm_quantize, v.k, shape, m)
            ->Unit(benchmark::kMicrosecond);
      }
    }
    for (int64_t m : {int64_t{1}, int64_t{8}, int64_t{64}}) {
      if (hand_gemv && m >= kernels::cpu::kQGemmMinRows) continue;
      for (const Shape& shape : kQwen05B) {
        for (Format f : {Format::kInt4G128, Format::kInt4G32, Format::kInt8Channel}) {
          const std::string name = "qkernel/" + v.name + "/" + shape.name + "/" + format_name(f) +
                                   "/m:" + std::to_string(m);
          benchmark::RegisterBenchmark(name.c_str(), bm_qkernel, v.k, f, shape, m)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
      }
    }
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!kernels::isa_supported(isa)) continue;
    for (int threads : {1, 2}) {
      for (int64_t m : {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{16}, int64_t{32}, int64_t{128},
                        int64_t{512}}) {
        for (const Shape& shape : kQwen05B) {
          for (Format f : {Format::kInt4G128, Format::kInt4G32, Format::kInt8Channel,
                           Format::kFp8Channel, Format::kFp8Block, Format::kBf16}) {
            const std::string name = std::string(shape.name) + "/" + kernels::isa_name(isa) + "/" +
                                     format_name(f) + "/m:" + std::to_string(m) +
                                     "/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), bm_qlinear, isa, f, shape, m, threads)
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
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
