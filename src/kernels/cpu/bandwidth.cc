// kernels/cpu: streaming-read bandwidth probe. SSE2 (x86-64 baseline) 128-bit loads into
// eight independent accumulators: two or three loads a cycle are far above what DRAM can
// deliver to one core, so the loop measures memory, not instruction throughput.
#include "kernels/cpu/bandwidth.h"

#include <emmintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/check.h"

namespace qs::kernels {
namespace {

uint64_t sum_slice(const __m128i* p, size_t n_vectors) {
  __m128i acc[8];
  for (__m128i& a : acc) a = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n_vectors; i += 8) {
    for (int u = 0; u < 8; ++u) acc[u] = _mm_add_epi64(acc[u], _mm_load_si128(p + i + u));
  }
  for (; i < n_vectors; ++i) acc[0] = _mm_add_epi64(acc[0], _mm_load_si128(p + i));
  for (int u = 1; u < 8; ++u) acc[0] = _mm_add_epi64(acc[0], acc[u]);
  alignas(16) uint64_t lanes[2];
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes), acc[0]);
  return lanes[0] + lanes[1];
}

}  // namespace

double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes, int repetitions) {
  constexpr size_t kAlign = 4096;
  bytes = std::max<size_t>(bytes / kAlign * kAlign, kAlign);
  std::unique_ptr<void, decltype(&std::free)> buffer(std::aligned_alloc(kAlign, bytes), &std::free);
  QS_CHECK_MSG(buffer != nullptr, "bandwidth probe: allocation failed");
  // Transparent huge pages where the kernel allows them (THP "madvise" mode is common): with
  // 4 KiB pages the probe measures TLB misses as much as DRAM (20 vs 26 GB/s on one core of
  // the dev VM), and then reads less than the decode kernel itself achieves.
  madvise(buffer.get(), bytes, MADV_HUGEPAGE);
  // Non-zero fill so that every page is really backed (a zero page could be shared).
  std::memset(buffer.get(), 1, bytes);

  const auto* data = static_cast<const __m128i*>(buffer.get());
  const size_t n_vectors = bytes / sizeof(__m128i);
  std::vector<uint64_t> sums(static_cast<size_t>(pool.n_threads()));
  double best_s = 0.0;
  for (int rep = 0; rep < std::max(1, repetitions); ++rep) {
    const auto start = std::chrono::steady_clock::now();
    pool.run([&](int t, int n_threads) {
      const size_t begin = n_vectors * static_cast<size_t>(t) / static_cast<size_t>(n_threads);
      const size_t end = n_vectors * static_cast<size_t>(t + 1) / static_cast<size_t>(n_threads);
      sums[static_cast<size_t>(t)] = sum_slice(data + begin, end - begin);
    });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep == 0 || s < best_s) best_s = s;
  }
  // Every byte is 0x01, so each 64-bit lane added is 0x0101010101010101: checking the total
  // proves the loop really read everything (and keeps the compiler from dropping it).
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  QS_CHECK(total == 0x0101010101010101ull * (bytes / 8));
  return static_cast<double>(bytes) / best_s / 1e9;
}

}  // namespace qs::kernels
