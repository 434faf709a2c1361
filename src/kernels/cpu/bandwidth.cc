// kernels/cpu: streaming-read bandwidth probe. The baseline sum uses SSE2 (x86-64 baseline)
// 128-bit loads into eight independent accumulators; on AVX-512 CPUs the 512-bit sums of
// bandwidth_avx512.cc run too (plain, and with the decode kernels' L2 prefetch), and the
// fastest variant counts: with 128-bit loads alone the probe read about half of what a
// 512-bit streaming sum over the same huge-page buffer reads on the Sapphire Rapids VM, and
// decode then showed 143-171% of its "roofline". Off x86 the baseline is the same loop in the
// compiler's generic 128-bit vectors (NEON on aarch64), reported as the "sse2" rate.
#include "kernels/cpu/bandwidth.h"

#include <unistd.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/bandwidth_cpu.h"
#include "kernels/cpu/isa.h"

#if QS_X86
#include <emmintrin.h>
#endif

namespace qs::kernels {
namespace {

// The decode kernels prefetch this far ahead (qlinear_avx512.cc kPrefetchBytes).
constexpr size_t kPrefetchAhead = 16 * 1024;

enum class Variant { kSse2, kAvx512, kAvx512Prefetch };

uint64_t sum_variant(Variant v, const char* p, size_t bytes) {
#if QS_X86
  switch (v) {
    case Variant::kSse2:
      return cpu::stream_sum_sse2(p, bytes);
    case Variant::kAvx512:
      return cpu::stream_sum_avx512(p, bytes, 0);
    case Variant::kAvx512Prefetch:
      return cpu::stream_sum_avx512(p, bytes, kPrefetchAhead);
  }
  return 0;
#else
  QS_CHECK(v == Variant::kSse2);  // the AVX-512 variants run only where isa_supported says so
  return cpu::stream_sum_words(p, bytes);
#endif
}

}  // namespace

#if QS_X86
uint64_t cpu::stream_sum_sse2(const void* data, size_t bytes) {
  const auto* p = static_cast<const __m128i*>(data);
  const size_t n = bytes / sizeof(__m128i);
  __m128i acc[8];
  for (__m128i& a : acc) a = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int u = 0; u < 8; ++u) acc[u] = _mm_add_epi64(acc[u], _mm_load_si128(p + i + u));
  }
  for (; i < n; ++i) acc[0] = _mm_add_epi64(acc[0], _mm_load_si128(p + i));
  for (int u = 1; u < 8; ++u) acc[0] = _mm_add_epi64(acc[0], acc[u]);
  alignas(16) uint64_t lanes[2];
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes), acc[0]);
  uint64_t total = lanes[0] + lanes[1];
  const auto* tail = reinterpret_cast<const uint64_t*>(p + n);
  for (size_t b = n * sizeof(__m128i); b + 8 <= bytes; b += 8) total += *tail++;
  return total;
}
#else
uint64_t cpu::stream_sum_words(const void* data, size_t bytes) {
  using U64x2 = uint64_t __attribute__((vector_size(16)));
  const auto* p = static_cast<const U64x2*>(data);
  const size_t n = bytes / sizeof(U64x2);
  U64x2 acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int u = 0; u < 8; ++u) acc[u] += p[i + u];
  }
  for (; i < n; ++i) acc[0] += p[i];
  for (int u = 1; u < 8; ++u) acc[0] += acc[u];
  uint64_t total = acc[0][0] + acc[0][1];
  const auto* tail = reinterpret_cast<const uint64_t*>(p + n);
  for (size_t b = n * sizeof(U64x2); b + 8 <= bytes; b += 8) total += *tail++;
  return total;
}
#endif

namespace {

// The largest cache sysconf reports. glibc takes it from CPUID, which on AMD describes the
// whole socket's L3 (384 MiB on the Zen 5 EPYC dev VM), not the 32 MiB of the core complex
// a thread can fill.
size_t sysconf_cache_bytes() {
  for (int name : {_SC_LEVEL4_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long v = sysconf(name);  // NOLINT(runtime/int): sysconf's type
    if (v > 0) return static_cast<size_t>(v);
  }
  return 0;
}

}  // namespace

size_t parse_cache_size(const std::string& text) {
  size_t i = 0;
  size_t value = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    value = value * 10 + static_cast<size_t>(text[i] - '0');
    if (value >= (size_t{1} << 32)) return 0;  // no cache is that large; the shift stays exact
  }
  if (i == 0) return 0;
  const std::string unit = text.substr(i, text.find_first_of(" \n", i) - i);
  if (unit.empty()) return value;
  if (unit == "K") return value << 10;
  if (unit == "M") return value << 20;
  if (unit == "G") return value << 30;
  return 0;
}

size_t sysfs_cache_bytes(const std::string& cache_dir) {
  size_t best = 0;
  int best_level = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = cache_dir + "/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level"), size_file(dir + "/size"), type_file(dir + "/type");
    int level = 0;
    std::string size, type;
    if (!(level_file >> level) || !(size_file >> size)) continue;
    type_file >> type;
    if (type == "Instruction") continue;
    const size_t bytes = parse_cache_size(size);
    if (bytes > 0 && level >= best_level) {
      best = level > best_level ? bytes : std::max(best, bytes);
      best_level = level;
    }
  }
  return best;
}

size_t last_level_cache_bytes() {
  static const size_t bytes = [] {
    const size_t sysfs = sysfs_cache_bytes("/sys/devices/system/cpu/cpu0/cache");
    return sysfs > 0 ? sysfs : sysconf_cache_bytes();
  }();
  return bytes;
}

size_t bandwidth_probe_bytes() {
  // The larger of the two reports: a guest may be shown the host's whole L3, and a pass must
  // not be served from any cache the data could sit in.
  return std::max<size_t>(size_t{1} << 30,
                          2 * std::max(last_level_cache_bytes(), sysconf_cache_bytes()));
}

double ReadBandwidth::best() const {
  return std::max({sse2, avx512, avx512_prefetch});
}

double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes, int repetitions) {
  return measure_read_bandwidth_variants(pool, bytes, repetitions).best();
}

ReadBandwidth measure_read_bandwidth_variants(ThreadPool& pool, size_t bytes, int repetitions) {
  constexpr size_t kAlign = 4096;
  bytes = std::max<size_t>(bytes / kAlign * kAlign, kAlign);
  std::unique_ptr<void, decltype(&std::free)> buffer(std::aligned_alloc(kAlign, bytes), &std::free);
  if (buffer == nullptr) throw std::bad_alloc();  // out of memory, not a bug of ours
  // Transparent huge pages where the kernel allows them (THP "madvise" mode is common): with
  // 4 KiB pages the probe measures TLB misses as much as DRAM (20 vs 26 GB/s on one core of
  // the dev VM), and then reads less than the decode kernel itself achieves.
  madvise(buffer.get(), bytes, MADV_HUGEPAGE);
  // Non-zero fill so that every page is really backed (a zero page could be shared).
  std::memset(buffer.get(), 1, bytes);

  // Slices of whole 64-byte lines, so every variant's loads stay aligned.
  const char* data = static_cast<const char*>(buffer.get());
  const size_t lines = bytes / 64;
  std::vector<Variant> variants{Variant::kSse2};
  if (isa_supported(Isa::kAvx512)) {
    variants.push_back(Variant::kAvx512);
    variants.push_back(Variant::kAvx512Prefetch);
  }
  std::vector<uint64_t> sums(static_cast<size_t>(pool.n_threads()));
  double best_s[3] = {0, 0, 0};  // per Variant
  for (int rep = 0; rep < std::max(1, repetitions); ++rep) {
    for (Variant v : variants) {
      const auto start = std::chrono::steady_clock::now();
      pool.run([&](int t, int n_threads) {
        const size_t begin = lines * static_cast<size_t>(t) / static_cast<size_t>(n_threads);
        const size_t end = lines * static_cast<size_t>(t + 1) / static_cast<size_t>(n_threads);
        // The last thread also takes the bytes past the last whole line.
        const size_t len = t + 1 == n_threads ? bytes - begin * 64 : (end - begin) * 64;
        sums[static_cast<size_t>(t)] = sum_variant(v, data + begin * 64, len);
      });
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double& best = best_s[static_cast<int>(v)];
      if (best == 0 || s < best) best = s;
      // Every byte is 0x01, so each 64-bit word is 0x0101010101010101: checking the total
      // proves the pass really read everything (and keeps the compiler from dropping it).
      uint64_t total = 0;
      for (uint64_t part : sums) total += part;
      QS_CHECK(total == 0x0101010101010101ull * (bytes / 8));
    }
  }
  auto gbs = [&](Variant v) {
    const double t = best_s[static_cast<int>(v)];
    return t > 0 ? static_cast<double>(bytes) / t / 1e9 : 0.0;
  };
  return ReadBandwidth{gbs(Variant::kSse2), gbs(Variant::kAvx512), gbs(Variant::kAvx512Prefetch)};
}

}  // namespace qs::kernels
