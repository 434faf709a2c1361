// ops: what the layers above may ask about the compute platform without reaching into
// kernels: which kernel ISA runs, and the memory read bandwidth that bounds decode (the
// roofline `quantserve bench` reports).
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace qs::ops {

// "avx512", "avx2" or "ref": the kernels this process dispatches to.
const char* active_kernel_isa();

// Streaming-read bandwidth in GB/s over a `bytes` buffer, best of `repetitions`, each pool
// thread reading its own slice.
double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes, int repetitions);

}  // namespace qs::ops
