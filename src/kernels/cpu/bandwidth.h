// kernels/cpu: a streaming-read probe of memory bandwidth, the roofline for decode (whose
// cost is the weight bytes read per token). Used by `quantserve bench` and bench/.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace qs::kernels {

// Sums a `bytes`-sized buffer (far larger than the caches), every pool thread reading its own
// contiguous slice, and returns the best of `repetitions` passes in GB/s (1e9 bytes/s).
// The buffer is allocated and touched once before timing, so page faults are not counted.
double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes = size_t{1} << 30,
                                  int repetitions = 5);

}  // namespace qs::kernels
