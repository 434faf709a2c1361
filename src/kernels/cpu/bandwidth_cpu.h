// kernels/cpu: the per-ISA streaming sums behind measure_read_bandwidth_gbs (bandwidth.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qs::kernels::cpu {

// Sum of the 64-bit words of data[0, bytes) (data 16-byte aligned, bytes a multiple of 8),
// read front to back with SSE2's 128-bit loads (every x86-64 CPU has them).
uint64_t stream_sum_sse2(const void* data, size_t bytes);

// Sum of the 64-bit words of data[0, bytes) (data 64-byte aligned, bytes a multiple of 8),
// read front to back with 512-bit loads; `prefetch_ahead` > 0 also prefetches every cache line
// that many bytes ahead into L2, the pattern of the decode kernels.
uint64_t stream_sum_avx512(const void* data, size_t bytes, size_t prefetch_ahead);

}  // namespace qs::kernels::cpu
