// ops: what the layers above may ask about the compute platform without reaching into
// kernels: which kernel ISA runs, and the memory read bandwidth that bounds decode (the
// roofline `quantserve bench` reports).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"

namespace qs::ops {

// Below ~32K multiply-adds (a few microseconds) waking the other threads costs more than it
// saves: the linear and GEMM front ends run such calls inline (tiny models such as
// stories260K decode several times faster so).
inline constexpr int64_t kMinParallelMacs = int64_t{1} << 15;

// "avx512", "avx2" or "ref": the kernels this process dispatches to.
const char* active_kernel_isa();

// Streaming-read bandwidth in GB/s over a `bytes` buffer, best of `repetitions`, each pool
// thread reading its own slice (kernels/cpu/bandwidth.h says how; docs/kernels.md, "The
// read-bandwidth probe", how to check it).
double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes, int repetitions);
// The probe's buffer size: past any cache (twice the reported last level, at least 1 GiB).
size_t bandwidth_probe_bytes();
// The last-level cache size the OS reports, 0 when unknown: weights smaller than this may be
// read from cache, so their decode is not bounded by the probe.
size_t last_level_cache_bytes();

}  // namespace qs::ops
