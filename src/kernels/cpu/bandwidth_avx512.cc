// kernels/cpu: the streaming sums of the bandwidth probe with 512-bit loads, the width the
// AVX-512 decode kernels read with (bandwidth.cc picks these when the CPU has AVX-512).
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*(), which
// -Wuninitialized flags once inlined (a false positive of GCC 12).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/bandwidth_cpu.h"

namespace qs::kernels::cpu {

uint64_t stream_sum_avx512(const void* data, size_t bytes, size_t prefetch_ahead) {
  const auto* p = static_cast<const __m512i*>(data);
  const size_t n = bytes / sizeof(__m512i);
  const char* base = static_cast<const char*>(data);
  __m512i acc[8];
  for (__m512i& a : acc) a = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (prefetch_ahead != 0) {
      // One prefetch per cache line, into L2, as the decode kernels do (past the end of the
      // slice is harmless: prefetches never fault).
      for (int u = 0; u < 8; ++u) {
        _mm_prefetch(base + (i + u) * sizeof(__m512i) + prefetch_ahead, _MM_HINT_T1);
      }
    }
    for (int u = 0; u < 8; ++u) acc[u] = _mm512_add_epi64(acc[u], _mm512_load_si512(p + i + u));
  }
  for (; i < n; ++i) acc[0] = _mm512_add_epi64(acc[0], _mm512_load_si512(p + i));
  for (int u = 1; u < 8; ++u) acc[0] = _mm512_add_epi64(acc[0], acc[u]);
  uint64_t total = static_cast<uint64_t>(_mm512_reduce_add_epi64(acc[0]));
  // The tail under 64 bytes, which the slices of an uneven split can leave.
  const auto* tail = reinterpret_cast<const uint64_t*>(p + n);
  for (size_t b = n * sizeof(__m512i); b + 8 <= bytes; b += 8) total += *tail++;
  return total;
}

}  // namespace qs::kernels::cpu
