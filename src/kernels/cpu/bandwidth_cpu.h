// kernels/cpu: the per-ISA streaming sums behind measure_read_bandwidth_gbs (bandwidth.h); off
// x86 its baseline ("sse2") rate is stream_sum_words'.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/isa.h"

namespace qs::kernels::cpu {

#if QS_X86
// Sum of the 64-bit words of data[0, bytes) (data 16-byte aligned, bytes a multiple of 8),
// read front to back with SSE2's 128-bit loads (every x86-64 CPU has them).
uint64_t stream_sum_sse2(const void* data, size_t bytes);

// Sum of the 64-bit words of data[0, bytes) (data 64-byte aligned, bytes a multiple of 8),
// read front to back with 512-bit loads; `prefetch_ahead` > 0 also prefetches every cache line
// that many bytes ahead into L2, the pattern of the decode kernels.
uint64_t stream_sum_avx512(const void* data, size_t bytes, size_t prefetch_ahead);
#else
// The baseline sum elsewhere (data 16-byte aligned, bytes a multiple of 8): the SSE2 loop's
// shape in the compiler's generic 128-bit vectors, which become the target's own loads and
// adds (NEON's on aarch64).
uint64_t stream_sum_words(const void* data, size_t bytes);
#endif

}  // namespace qs::kernels::cpu
