// The bandwidth probe reads its whole buffer in every variant (SSE2; AVX-512 plain and with
// prefetch where the CPU has it: it checks each pass's sum itself and aborts if a byte was
// skipped) and returns a finite, plausible rate for 1 and 2 threads, including a size
// that does not split evenly between the threads.
#include "kernels/cpu/bandwidth.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qs {
namespace {

TEST(Bandwidth, ReturnsPlausibleRate) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (size_t bytes : {size_t{64} << 20, (size_t{48} << 20) + 3 * 4096 + 123}) {
      const double gbs = kernels::measure_read_bandwidth_gbs(pool, bytes, 2);
      EXPECT_TRUE(std::isfinite(gbs)) << threads << " threads, " << bytes << " bytes";
      // Any machine that runs this reads faster than 100 MB/s and slower than 10 TB/s.
      EXPECT_GT(gbs, 0.1);
      EXPECT_LT(gbs, 1e4);
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

}  // namespace
}  // namespace qs
