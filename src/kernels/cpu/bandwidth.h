// kernels/cpu: a streaming-read probe of memory bandwidth, the roofline for decode (whose
// cost is the weight bytes read per token). Used by `quantserve bench` and bench/.
#pragma once

#include <cstddef>
#include <string>

#include "core/thread_pool.h"

namespace qs::kernels {

// The probe's default buffer: twice the last-level cache the OS reports, and at least 1 GiB,
// so that no pass can be served from cache (a KVM guest may report the host's whole L3:
// 480 MiB on the Sapphire Rapids dev VM, where 512 MiB, the old size, was not safely past it).
size_t bandwidth_probe_bytes();

// The last-level cache a thread of this process can fill, 0 when unknown: the largest data or
// unified cache of CPU 0 in sysfs (one core complex's L3 on AMD), else sysconf's. `bench`
// marks decode whose weights fit it: their roofline fraction is not a bandwidth figure.
size_t last_level_cache_bytes();

// sysfs_cache_bytes: the largest data or unified cache of the highest level listed under
// `cache_dir` (/sys/devices/system/cpu/cpuN/cache: index*/level, size, type), 0 when none.
// parse_cache_size: a sysfs size ("32768K", "1M", "512") in bytes, 0 when malformed.
size_t sysfs_cache_bytes(const std::string& cache_dir);
size_t parse_cache_size(const std::string& text);

// Sums a `bytes`-sized buffer, every pool thread reading its own contiguous slice, and returns
// the best of `repetitions` passes in GB/s (1e9 bytes/s). Each pass runs every variant this
// CPU has and keeps the fastest: SSE2 128-bit loads, and with AVX-512 512-bit loads plain and
// with the decode kernels' L2 prefetch 16 KiB ahead. So the probe reads at least as fast as a
// plain streaming sum, and as fast as the decode kernels' own access pattern can; a decode
// step above 100% of it means the weights came from cache. The buffer is allocated (huge
// pages where allowed) and touched once before timing, so page faults are not counted.
double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes = bandwidth_probe_bytes(),
                                  int repetitions = 5);

// The same passes, each variant's best in GB/s (0 where the CPU lacks it), for readers who
// want to check the probe against a plain streaming sum (`avx512` is one).
struct ReadBandwidth {
  double sse2 = 0, avx512 = 0, avx512_prefetch = 0;
  double best() const;
};
ReadBandwidth measure_read_bandwidth_variants(ThreadPool& pool,
                                              size_t bytes = bandwidth_probe_bytes(),
                                              int repetitions = 5);

}  // namespace qs::kernels
