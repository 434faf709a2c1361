// Kernel lab: the compute peaks prefill is measured against, per core of this CPU. f32 FMA
// (vfmadd231ps), AVX-512 BF16 dot products (vdpbf16ps: two multiply-adds per f32 lane, so
// twice FMA's rate only where the CPU issues it as fast: measured, not assumed), AVX-512 VNNI
// int8 (vpdpbusd), AMX int8 (tdpbssd, K = 64) and AMX bf16
// (tdpbf16ps): independent accumulators, operands in L1, so the figure is the instruction
// throughput. Plus the ceiling of the AMX int8 GEMM's design (qlinear_amx.cc): one
// 16 x 16 x 32 product per 32-input block, zeroed before and stored after (the activation
// scale differs per block), with and without the f32 pass over the stored products.
// Counters: GOP/s (2 x multiply-adds per second, CPU time of the calling thread). Cases the
// CPU lacks are skipped. Run: build/bench/peak_bench
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*(), which
// -Wuninitialized flags once inlined (a false positive of GCC 12).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/qlinear_bf16act.h"

namespace qs {
namespace {

constexpr int64_t kIters = 1 << 16;

__attribute__((target("avx512f,fma"))) double f32_fma(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(a, acc[i], b);
  }
  for (int i = 0; i < 16; ++i) benchmark::DoNotOptimize(acc[i]);
  return static_cast<double>(iters) * 16 * 16;  // multiply-adds
}

__attribute__((target("avx512f,avx512bf16"))) double bf16_dot(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  for (int i = 0; i < 16; ++i) benchmark::DoNotOptimize(acc[i]);
  return static_cast<double>(iters) * 16 * 32;
}

__attribute__((target("avx512f,avx512vnni"))) double vnni_int8(int64_t iters) {
  __m512i acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  for (int i = 0; i < 16; ++i) benchmark::DoNotOptimize(acc[i]);
  return static_cast<double>(iters) * 16 * 64;
}

struct alignas(64) TileConfig {
  uint8_t palette_id, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// A tiles 0, 1: 16 rows x k_bytes; B tiles 2, 3: k_bytes / 4 rows x 64 bytes; C 4..7: 16 x 64.
__attribute__((target("amx-tile"))) void configure(int k_bytes) {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  cfg.colsb[0] = cfg.colsb[1] = static_cast<uint16_t>(k_bytes);
  cfg.rows[2] = cfg.rows[3] = static_cast<uint8_t>(k_bytes / 4);
  asm volatile("" : : "r"(&cfg) : "memory");  // GCC 12 drops the stores otherwise
  _tile_loadconfig(&cfg);
}

alignas(64) int8_t g_a[2][16 * 64];
alignas(64) int8_t g_b[2][16 * 64];
alignas(64) int32_t g_c[4][16 * 16];

// mode 0: accumulate in the C tiles (peak); 1: zero and store every C tile per step (the
// int8 GEMM's per-block pattern); 2: as 1 plus the f32 pass (cvt + FMA by a scale per row).
__attribute__((target("avx512f,amx-tile,amx-int8,amx-bf16"))) double amx(int64_t iters, bool bf16,
                                                                         int k_bytes, int mode) {
  configure(k_bytes);
  _tile_loadd(0, g_a[0], 64);
  _tile_loadd(1, g_a[1], 64);
  _tile_loadd(2, g_b[0], 64);
  _tile_loadd(3, g_b[1], 64);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  __m512 sum[16];
  for (__m512& s : sum) s = _mm512_setzero_ps();
  for (int64_t it = 0; it < iters; ++it) {
    if (mode >= 1) {
      _tile_zero(4);
      _tile_zero(5);
      _tile_zero(6);
      _tile_zero(7);
    }
    if (bf16) {
      _tile_dpbf16ps(4, 0, 2);
      _tile_dpbf16ps(5, 0, 3);
      _tile_dpbf16ps(6, 1, 2);
      _tile_dpbf16ps(7, 1, 3);
    } else {
      _tile_dpbssd(4, 0, 2);
      _tile_dpbssd(5, 0, 3);
      _tile_dpbssd(6, 1, 2);
      _tile_dpbssd(7, 1, 3);
    }
    if (mode >= 1) {
      _tile_stored(4, g_c[0], 64);
      _tile_stored(5, g_c[1], 64);
      _tile_stored(6, g_c[2], 64);
      _tile_stored(7, g_c[3], 64);
    }
    if (mode == 2) {
      for (int t = 0; t < 4; ++t) {
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) {
          sum[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(g_c[t] + r * 16)),
                                   _mm512_set1_ps(1.0f + static_cast<float>(r)), sum[r]);
        }
      }
    }
  }
  _tile_release();
  for (__m512& s : sum) benchmark::DoNotOptimize(s);
  // Per step 4 tile products of 16 x 16 x (k_bytes / element size) multiply-adds.
  return static_cast<double>(iters) * 4 * 16 * 16 * (bf16 ? k_bytes / 2 : k_bytes);
}

template <typename Fn>
void run(benchmark::State& state, Fn fn) {
  double macs = 0;
  for (auto _ : state) macs += fn();
  state.counters["GOP/s"] = benchmark::Counter(2 * macs / 1e9, benchmark::Counter::kIsRate);
}

void register_all() {
  const bool avx512 = kernels::isa_supported(kernels::Isa::kAvx512);
  const bool has_amx = kernels::amx_supported();
  auto reg = [](const char* name, auto fn) {
    benchmark::RegisterBenchmark(name, run<decltype(fn)>, fn);
  };
  if (avx512) {
    reg("f32_fma_avx512", [] { return f32_fma(kIters); });
    reg("int8_vnni_avx512", [] { return vnni_int8(kIters); });
  }
  if (kernels::cpu::bf16act_supported()) reg("bf16_dot_avx512", [] { return bf16_dot(kIters); });
  if (has_amx) {
    reg("int8_amx_k64", [] { return amx(kIters, false, 64, 0); });
    reg("bf16_amx_k32", [] { return amx(kIters, true, 64, 0); });
    reg("int8_amx_k32_store_per_block", [] { return amx(kIters, false, 32, 1); });
    reg("int8_amx_k32_store_and_f32_pass", [] { return amx(kIters, false, 32, 2); });
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
