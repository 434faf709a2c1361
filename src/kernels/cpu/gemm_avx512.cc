// kernels/cpu: AVX-512 f32 GEMM (gemm_cpu.h). Tiles of up to 8 rows x 32 columns: 16 zmm
// accumulators, 2 for B, 1 broadcast. The B block is packed into an aligned panel (zero past n); C
// column tails use masked loads and stores.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/gemm_cpu.h"

namespace qs::kernels::cpu {
namespace {

constexpr int kMR = 8;
constexpr int64_t kNR = 32;
constexpr int64_t kKC = 256;  // 256 rows x 32 columns of B = 32 KiB, packed into a panel

template <int MR>
void tile(const GemmArgs& g, const float* panel, int64_t i0, int64_t j0, int64_t cols, int64_t p0,
          int64_t pc, bool load_c) {
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32   ? __mmask16(0xffff)
                       : cols <= 16 ? __mmask16(0)
                                    : __mmask16((1u << (cols - 16)) - 1);
  __m512 acc[MR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* c = g.c + (i0 + r) * g.ldc + j0;
    acc[r][0] = load_c ? _mm512_maskz_loadu_ps(m0, c) : _mm512_setzero_ps();
    acc[r][1] = load_c ? _mm512_maskz_loadu_ps(m1, c + 16) : _mm512_setzero_ps();
  }
  const float* a = g.a + i0 * g.a_row_stride + p0 * g.a_col_stride;
  for (int64_t p = 0; p < pc; ++p) {
    const __m512 b0 = _mm512_load_ps(panel + p * kNR);
    const __m512 b1 = _mm512_load_ps(panel + p * kNR + 16);
    const float* ap = a + p * g.a_col_stride;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * g.a_row_stride]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* c = g.c + (i0 + r) * g.ldc + j0;
    _mm512_mask_storeu_ps(c, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + 16, m1, acc[r][1]);
  }
}

using TileFn = void (*)(const GemmArgs&, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                        bool);
constexpr TileFn kTiles[kMR + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>,
                                    tile<5>, tile<6>, tile<7>, tile<8>};

}  // namespace

void gemm_f32_avx512(const GemmArgs& g, int64_t i_begin, int64_t i_end) {
  if (g.k == 0 && !g.accumulate) {
    for (int64_t i = i_begin; i < i_end; ++i) std::fill_n(g.c + i * g.ldc, g.n, 0.0f);
    return;
  }
  alignas(64) float panel[kKC * kNR];
  for (int64_t p0 = 0; p0 < g.k; p0 += kKC) {
    const int64_t pc = std::min(kKC, g.k - p0);
    const bool load_c = g.accumulate || p0 > 0;
    for (int64_t j0 = 0; j0 < g.n; j0 += kNR) {
      const int64_t cols = std::min(kNR, g.n - j0);
      // The B block as one contiguous, aligned panel (columns past n zero), reused by every
      // row tile: the strided rows of B would otherwise be re-fetched line by line per tile.
      for (int64_t p = 0; p < pc; ++p) {
        const float* src = g.b + (p0 + p) * g.ldb + j0;
        std::copy_n(src, cols, panel + p * kNR);
        std::fill(panel + p * kNR + cols, panel + (p + 1) * kNR, 0.0f);
      }
      for (int64_t i0 = i_begin; i0 < i_end; i0 += kMR) {
        const int64_t rows = std::min<int64_t>(kMR, i_end - i0);
        kTiles[rows](g, panel, i0, j0, cols, p0, pc, load_c);
      }
    }
  }
}

}  // namespace qs::kernels::cpu
