// kernels/cpu: the exact W4A16 linear on resident panels (kernels/qpanels.h) with AVX512-BF16.
// A 64-byte chunk of a panel is 8 inputs of 16 columns; three shifts and four vpermw turn it
// into four vectors of bf16 pairs (the table maps each nibble, with the bit above it ignored,
// to its code minus the uniform zero), and each meets the broadcast pair of x in one vdpbf16ps
// that feeds 16 columns at once. Per group, the 16 lanes are scaled by the group's 16 scales
// (and the zero terms meet the group sums); a column's result never needs a horizontal sum.
// GCC 12's intrinsic headers trip -Wmaybe-uninitialized on _mm512_undefined (as in the other
// AVX-512 kernels).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/qlinear_bf16act.h"

namespace qs::kernels::cpu {
namespace {

// Prefetch distance along a panel's stream: panels are read front to back, R rows at a time,
// by up to four streams at once.
constexpr int64_t kPrefetchBytes = 1024;

// bf16 of (i mod 16) - zero for the 32 five-bit indices vpermw reads.
__m512i nibble_table(float zero) {
  alignas(64) uint16_t t[32];
  for (int i = 0; i < 32; ++i) t[i] = f32_to_bf16(static_cast<float>(i % 16) - zero);
  return _mm512_load_si512(t);
}

inline __m512 broadcast_pair(const uint16_t* x) {
  int32_t v;
  std::memcpy(&v, x, sizeof(v));
  return _mm512_castsi512_ps(_mm512_set1_epi32(v));
}

// Rows [i0, i0 + R) of the P panels from `p0`. `kSplit` keeps two accumulators per tile so that
// a lone row still has 2P independent vdpbf16ps chains.
template <int R, int P, bool kSplit>
void tile(const QPanelsView& w, const Bf16ActsView& a, int64_t i0, int64_t p0, __m512i table,
          __m512 out[R][P]) {
  const size_t panel_bytes = w.panel_bytes();
  const uint8_t* codes[P];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) codes[p] = w.codes + static_cast<size_t>(p0 + p) * panel_bytes;
  const uint16_t* xr[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) xr[r] = a.x + (i0 + r) * a.k_pad;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) out[r][p] = _mm512_setzero_ps();
  }
  const int64_t chunks = w.k_pad / 8, per_group = w.group_size / 8;
  for (int64_t g = 0; g < w.n_groups; ++g) {
    __m512 acc[R][P], acc2[R][P];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[r][p] = acc2[r][p] = _mm512_setzero_ps();
    }
    const int64_t q_end = std::min(chunks, (g + 1) * per_group);
    for (int64_t q = g * per_group; q < q_end; ++q) {
      __m512bh u[P][4];
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {
        const uint8_t* c = codes[p] + q * kPanelChunk;
        _mm_prefetch(reinterpret_cast<const char*>(c) + kPrefetchBytes, _MM_HINT_T0);
        const __m512i v = _mm512_load_si512(c);
        u[p][0] = (__m512bh)_mm512_permutexvar_epi16(v, table);
        u[p][1] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), table);
        u[p][2] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 8), table);
        u[p][3] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 12), table);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint16_t* x = xr[r] + q * 8;
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          const __m512bh xv = (__m512bh)broadcast_pair(x + 2 * t);
#pragma GCC unroll 4
          for (int p = 0; p < P; ++p) {
            if (kSplit && (t & 1)) {
              acc2[r][p] = _mm512_dpbf16_ps(acc2[r][p], u[p][t], xv);
            } else {
              acc[r][p] = _mm512_dpbf16_ps(acc[r][p], u[p][t], xv);
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const size_t at = static_cast<size_t>(((p0 + p) * w.n_groups + g) * kPanelCols);
      const __m512 scale = _mm512_load_ps(w.scales + at);
      const __m512 zt =
          w.zero_terms != nullptr ? _mm512_load_ps(w.zero_terms + at) : _mm512_setzero_ps();
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 sum = kSplit ? _mm512_add_ps(acc[r][p], acc2[r][p]) : acc[r][p];
        out[r][p] = _mm512_fmadd_ps(sum, scale, out[r][p]);
        if (w.zero_terms != nullptr) {
          out[r][p] =
              _mm512_fmadd_ps(zt, _mm512_set1_ps(a.gsum[(i0 + r) * a.n_groups + g]), out[r][p]);
        }
      }
    }
  }
}

template <int R, int P, bool kSplit>
void run_tile(const QPanelsView& w, const Bf16ActsView& a, const float* bias, int64_t i0,
              int64_t p0, int64_t n_end, __m512i table, float* y) {
  __m512 out[R][P];
  tile<R, P, kSplit>(w, a, i0, p0, table, out);
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
    const int64_t j0 = (p0 + p) * kPanelCols;
    const int64_t cols = std::min<int64_t>(kPanelCols, n_end - j0);
    const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + j0) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(y + (i0 + r) * w.n + j0, mask, _mm512_add_ps(out[r][p], b));
    }
  }
}

// Rows [i0, i0 + R) over the panels of [n_begin, n_end): P panels at a time, then one.
template <int R, int P, bool kSplit>
void rows_over_panels(const QPanelsView& w, const Bf16ActsView& a, const float* bias, int64_t i0,
                      int64_t n_begin, int64_t n_end, __m512i table, float* y) {
  const int64_t p_end = (n_end + kPanelCols - 1) / kPanelCols;
  int64_t p = n_begin / kPanelCols;
  for (; p + P <= p_end; p += P) run_tile<R, P, kSplit>(w, a, bias, i0, p, n_end, table, y);
  for (; p < p_end; ++p) run_tile<R, 1, true>(w, a, bias, i0, p, n_end, table, y);
}

}  // namespace

void qlinear_bf16panels_avx512(const QPanelsView& w, const Bf16ActsView& a, const float* bias,
                               int64_t n_begin, int64_t n_end, float* y) {
  const __m512i table = nibble_table(w.zero_terms != nullptr ? 0.0f : w.uniform_zero);
  switch (a.m) {
    case 1:
      return rows_over_panels<1, 4, true>(w, a, bias, 0, n_begin, n_end, table, y);
    case 2:
      return rows_over_panels<2, 2, true>(w, a, bias, 0, n_begin, n_end, table, y);
    case 3:
      return rows_over_panels<3, 2, false>(w, a, bias, 0, n_begin, n_end, table, y);
    default:
      break;
  }
  // Batches and prefill: four rows at a time over two panels (8 chains). A block of rows whose
  // bf16 x fits in half of L2 meets every pair of panels in turn, so x comes from L2 while a
  // pair (up to ~80 KiB) stays in L1/L2 for the block's strips; the rest of the rows go one at
  // a time. Each strip decodes the pair again: decoding a pair once per block into an L2
  // buffer that the strips load instead measured 1.3-2x slower at m = 16..512 (Zen 4, beside
  // other builds): the loads of the decoded vectors, beside x's broadcasts, outweigh the
  // shifts and vpermw they save.
  constexpr size_t kRowBlockBytes = 384 * 1024;
  const int64_t row_block = std::max<int64_t>(
      4, static_cast<int64_t>(kRowBlockBytes / static_cast<size_t>(2 * a.k_pad)) / 4 * 4);
  const int64_t p_end = (n_end + kPanelCols - 1) / kPanelCols;
  for (int64_t i_begin = 0; i_begin < a.m; i_begin += row_block) {
    const int64_t i_end = std::min(a.m, i_begin + row_block);
    for (int64_t p = n_begin / kPanelCols; p < p_end; p += 2) {
      const int64_t sub_end = std::min(n_end, (p + 2) * kPanelCols);
      int64_t i = i_begin;
      for (; i + 4 <= i_end; i += 4) {
        rows_over_panels<4, 2, false>(w, a, bias, i, p * kPanelCols, sub_end, table, y);
      }
      for (; i < i_end; ++i) {
        rows_over_panels<1, 2, true>(w, a, bias, i, p * kPanelCols, sub_end, table, y);
      }
    }
  }
}

}  // namespace qs::kernels::cpu
