// kernels/cpu: the bf16 linear over resident pair panels (linear_cpu.h, "Pair panels"), for
// every m of batched decode. Per k step one 64-byte load, a shift and a mask widen 32 columns
// to f32, and every row of the chunk adds x[i, kk] (a broadcast from memory, no shuffle) times
// them: 2 * MR FMAs for 2 ALU operations. Compiled with -mavx512f/bw/vl/dq.
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*(), which
// -Wuninitialized flags once inlined (a false positive of GCC 12).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/linear_cpu.h"

namespace qs::kernels::cpu {
namespace {

// Rows of x per pass over a panel: 2 * 12 accumulators, the two widened vectors and a
// broadcast fit the 32 registers. A panel (k * 64 bytes, 56 KiB at k = 896) is read from
// memory by the first pass and from L2 by the others.
constexpr int kMR = 12;

__mmask16 lanes(int64_t count) {
  if (count <= 0) return 0;
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// The first pass over a panel streams it from memory at one 64-byte line per k step, about a
// core's DRAM bandwidth at 12 rows, and the hardware prefetcher alone kept m = 1 at 9 GB/s.
// With several passes (m > kMR), every pass prefetches its share of the next panel into L2
// (pass p of n the lines [p s, (p + 1) s), s = ceil(k / n), one per step), which keeps memory
// busy while the later passes compute from L2. With one pass (decode, m <= kMR) nothing reads
// a panel twice, and a prefetch into L1 a fixed kStreamAhead lines ahead in the weight stream
// (panels are contiguous, so it runs on into the next panel) keeps more lines in flight: one
// thread's m = 1 GEMV over a 151936 x 2048 bf16 lm_head went from 22.5-22.8 GB/s (the L2
// scheme) to 26.6-28.2 (32 lines ahead 25.8-27.7, 128: 25.0-26.4, 256: 24.6-26.0; into L2
// instead of L1 at 64: 21.8-22.1), as fast as a plain 4-stream read probe of the same buffer
// (26.1-27.7 GB/s), Zen 4, alternated in one run. Past the last panel the addresses are
// harmless: prefetches never fault. Stores the columns [c_begin, c_end) of the panel at j0 (a
// thread's range may start or end inside a panel).
constexpr int64_t kStreamAhead = 64;

template <int M, bool kOnePass>
void panel_pass(const LinearArgs& a, const uint16_t* panel, int64_t i0, int64_t j0, int64_t c_begin,
                int64_t c_end, int64_t pass, int64_t n_passes) {
  const int64_t k = a.k;
  const float* x = a.x + i0 * k;
  __m512 lo_acc[M], hi_acc[M];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) lo_acc[i] = hi_acc[i] = _mm512_setzero_ps();
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const int64_t share = (k + n_passes - 1) / n_passes;
  const uint16_t* next = panel + (k + pass * share) * kPanelCols;
  for (int64_t kk = 0; kk < k; ++kk) {
    const __m512i v = _mm512_load_si512(panel + kk * kPanelCols);
    if constexpr (kOnePass) {
      _mm_prefetch(reinterpret_cast<const char*>(panel + (kk + kStreamAhead) * kPanelCols),
                   _MM_HINT_T0);
    } else if (kk < share) {
      _mm_prefetch(reinterpret_cast<const char*>(next + kk * kPanelCols), _MM_HINT_T1);
    }
    const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m512 xb = _mm512_set1_ps(x[i * k + kk]);
      lo_acc[i] = _mm512_fmadd_ps(xb, lo, lo_acc[i]);
      hi_acc[i] = _mm512_fmadd_ps(xb, hi, hi_acc[i]);
    }
  }
  const __mmask16 m_lo = lanes(c_end) & ~lanes(c_begin);
  const __mmask16 m_hi = lanes(c_end - 16) & ~lanes(c_begin - 16);
  __m512 b_lo = _mm512_setzero_ps(), b_hi = _mm512_setzero_ps();
  if (a.bias != nullptr) {
    b_lo = _mm512_maskz_loadu_ps(m_lo, a.bias + j0);
    b_hi = _mm512_maskz_loadu_ps(m_hi, a.bias + j0 + 16);
  }
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
    float* y = a.y + (i0 + i) * a.n + j0;
    _mm512_mask_storeu_ps(y, m_lo, _mm512_add_ps(lo_acc[i], b_lo));
    _mm512_mask_storeu_ps(y + 16, m_hi, _mm512_add_ps(hi_acc[i], b_hi));
  }
}

template <int M>
void panel_tail(const LinearArgs& a, const uint16_t* panel, int64_t i0, int64_t j0, int rows,
                int64_t c_begin, int64_t c_end, int64_t pass, int64_t n_passes) {
  if constexpr (M > 1) {
    if (rows < M) return panel_tail<M - 1>(a, panel, i0, j0, rows, c_begin, c_end, pass, n_passes);
  }
  if (n_passes == 1) {
    panel_pass<M, true>(a, panel, i0, j0, c_begin, c_end, pass, n_passes);
  } else {
    panel_pass<M, false>(a, panel, i0, j0, c_begin, c_end, pass, n_passes);
  }
}

}  // namespace

void linear_panels_bf16_avx512(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  const auto* panels = static_cast<const uint16_t*>(a.w);
  const int64_t n_passes = (a.m + kMR - 1) / kMR;
  for (int64_t j0 = n_begin / kPanelCols * kPanelCols; j0 < n_end; j0 += kPanelCols) {
    const uint16_t* panel = panels + j0 * a.k;
    const int64_t c_begin = std::max<int64_t>(n_begin - j0, 0);
    const int64_t c_end = std::min<int64_t>(n_end - j0, kPanelCols);
    int64_t i0 = 0, pass = 0;
    for (; i0 + kMR <= a.m; i0 += kMR, ++pass) {
      if (n_passes == 1) {
        panel_pass<kMR, true>(a, panel, i0, j0, c_begin, c_end, pass, n_passes);
      } else {
        panel_pass<kMR, false>(a, panel, i0, j0, c_begin, c_end, pass, n_passes);
      }
    }
    if (i0 < a.m) {
      panel_tail<kMR - 1>(a, panel, i0, j0, static_cast<int>(a.m - i0), c_begin, c_end, pass,
                          n_passes);
    }
  }
}

}  // namespace qs::kernels::cpu
