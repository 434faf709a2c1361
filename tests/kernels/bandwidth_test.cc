// The bandwidth probe (kernels/cpu/bandwidth.h): each streaming sum it times reads every
// 64-bit word of its slice exactly once (words that differ, so a skipped or repeated line
// changes the sum), at slice lengths the probe's uneven splits produce; every variant this
// CPU has is timed and reported, the others report 0 and are named as skipped; the default
// buffer is past the last-level cache; and that cache is read from sysfs as this machine's
// kernel writes it (a Zen 5 EPYC guest's cpu0 tree, where sysconf says 384 MiB).
#include "kernels/cpu/bandwidth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/bandwidth_cpu.h"
#include "kernels/cpu/isa.h"

namespace qs {
namespace {

// 64-byte aligned words w[i] = i * odd constant: no two lines sum alike.
struct Words {
  explicit Words(size_t n)
      : buf(static_cast<uint64_t*>(std::aligned_alloc(64, (n * 8 + 63) / 64 * 64)), &std::free),
        count(n) {
    for (size_t i = 0; i < n; ++i) buf.get()[i] = (i + 1) * 0x9E3779B97F4A7C15ull;
  }
  uint64_t sum(size_t from, size_t n) const {
    uint64_t s = 0;
    for (size_t i = from; i < from + n; ++i) s += buf.get()[i];
    return s;
  }
  std::unique_ptr<uint64_t, decltype(&std::free)> buf;
  size_t count;
};

// Lengths in words: under one vector, across the 8-vector unroll, with tails of 1..7 words,
// and a slice starting on a later 64-byte line (as a second thread's does).
constexpr size_t kLengths[] = {1, 2, 7, 8, 9, 63, 64, 65, 127, 128, 1000, 4096 + 5};

TEST(Bandwidth, Sse2SumReadsEveryWordOnce) {
  const Words w(8 + 4096 + 5);
  for (size_t n : kLengths) {
    EXPECT_EQ(kernels::cpu::stream_sum_sse2(w.buf.get(), n * 8), w.sum(0, n)) << n << " words";
    EXPECT_EQ(kernels::cpu::stream_sum_sse2(w.buf.get() + 8, n * 8), w.sum(8, n)) << n;
  }
}

TEST(Bandwidth, Avx512SumsReadEveryWordOnce) {
  if (!kernels::isa_supported(kernels::Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  const Words w(8 + 4096 + 5);
  for (size_t prefetch : {size_t{0}, size_t{16 * 1024}}) {
    for (size_t n : kLengths) {
      EXPECT_EQ(kernels::cpu::stream_sum_avx512(w.buf.get(), n * 8, prefetch), w.sum(0, n))
          << n << " words, prefetch " << prefetch;
      EXPECT_EQ(kernels::cpu::stream_sum_avx512(w.buf.get() + 8, n * 8, prefetch), w.sum(8, n))
          << n << " words from line 1, prefetch " << prefetch;
    }
  }
}

// Every variant the CPU has is timed (a rate above zero), the probe reports the best of them,
// and one the CPU lacks reports 0. The probe itself aborts if a pass's sum is off, so the
// uneven size (not a multiple of the threads' line split) also checks the split's tail.
TEST(Bandwidth, TimesEveryVariantTheCpuHas) {
  const bool avx512 = kernels::isa_supported(kernels::Isa::kAvx512);
  if (!avx512) std::printf("[ NOTE ] no AVX-512: its two variants are skipped (rate 0)\n");
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (size_t bytes : {size_t{64} << 20, (size_t{48} << 20) + 3 * 4096 + 123}) {
      const kernels::ReadBandwidth r = kernels::measure_read_bandwidth_variants(pool, bytes, 1);
      const std::string what = std::to_string(threads) + " threads, " + std::to_string(bytes);
      EXPECT_TRUE(std::isfinite(r.sse2) && r.sse2 > 0) << what;
      EXPECT_EQ(r.avx512 > 0, avx512) << what;
      EXPECT_EQ(r.avx512_prefetch > 0, avx512) << what;
      EXPECT_EQ(r.best(), std::max({r.sse2, r.avx512, r.avx512_prefetch})) << what;
    }
  }
}

// The default buffer is past any cache the OS reports: a probe served from cache would call
// DRAM-bound decode slow.
TEST(Bandwidth, DefaultBufferIsPastTheLastLevelCache) {
  const size_t llc = kernels::last_level_cache_bytes();
  EXPECT_GE(kernels::bandwidth_probe_bytes(), size_t{1} << 30);
  EXPECT_GE(kernels::bandwidth_probe_bytes(), 2 * llc);
}

TEST(Bandwidth, ParsesSysfsCacheSizes) {
  EXPECT_EQ(kernels::parse_cache_size("32768K"), size_t{32} << 20);
  EXPECT_EQ(kernels::parse_cache_size("48K\n"), size_t{48} << 10);
  EXPECT_EQ(kernels::parse_cache_size("1M"), size_t{1} << 20);
  EXPECT_EQ(kernels::parse_cache_size("2G"), size_t{2} << 30);
  EXPECT_EQ(kernels::parse_cache_size("512"), size_t{512});
  for (const char* bad : {"", "K", "12Q", "-4K", "99999999999999999999K"}) {
    EXPECT_EQ(kernels::parse_cache_size(bad), 0u) << bad;
  }
}

// The cpu0 cache tree of the Zen 5 EPYC dev VM: L1d 48K, L1i 32K, L2 1024K, L3
// 32768K per core complex; sysconf reports 384 MiB there, the socket's L3.
TEST(Bandwidth, LastLevelCacheIsTheHighestSysfsLevel) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("qs_cache_" + std::to_string(::getpid()));
  const struct {
    int level;
    const char* type;
    const char* size;
  } caches[] = {{1, "Data", "48K"},
                {1, "Instruction", "32K"},
                {2, "Unified", "1024K"},
                {3, "Unified", "32768K"}};
  int index = 0;
  for (const auto& c : caches) {
    const std::filesystem::path dir = root / ("index" + std::to_string(index++));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "level") << c.level << "\n";
    std::ofstream(dir / "type") << c.type << "\n";
    std::ofstream(dir / "size") << c.size << "\n";
  }
  EXPECT_EQ(kernels::sysfs_cache_bytes(root.string()), size_t{32} << 20);
  // Without an L3 the L2 is the last level; an instruction cache never counts.
  std::filesystem::remove_all(root / "index3");
  EXPECT_EQ(kernels::sysfs_cache_bytes(root.string()), size_t{1} << 20);
  std::filesystem::remove_all(root / "index2");
  EXPECT_EQ(kernels::sysfs_cache_bytes(root.string()), size_t{48} << 10);
  std::filesystem::remove_all(root);
  EXPECT_EQ(kernels::sysfs_cache_bytes(root.string()), 0u);
}

}  // namespace
}  // namespace qs
