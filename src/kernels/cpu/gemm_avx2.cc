// kernels/cpu: AVX2+FMA f32 GEMM (gemm_cpu.h). Tiles of up to 6 rows x 16 columns: 12 ymm
// accumulators, 2 for B, 1 broadcast. The B block is packed into an aligned panel (zero past n); C
// column tails use masked loads and stores.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/gemm_cpu.h"

namespace qs::kernels::cpu {
namespace {

constexpr int kMR = 6;
constexpr int64_t kNR = 16;
constexpr int64_t kKC = 256;  // 256 rows x 16 columns of B = 16 KiB, packed into a panel

// Lane l is enabled when l < count (count clamped to [0, 8]).
__m256i lane_mask(int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int n = static_cast<int>(std::clamp<int64_t>(count, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes);
}

template <int MR>
void tile(const GemmArgs& g, const float* panel, int64_t i0, int64_t j0, int64_t cols, int64_t p0,
          int64_t pc, bool load_c) {
  const __m256i m0 = lane_mask(cols), m1 = lane_mask(cols - 8);
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    float* c = g.c + (i0 + r) * g.ldc + j0;
    acc[r][0] = load_c ? _mm256_maskload_ps(c, m0) : _mm256_setzero_ps();
    acc[r][1] = load_c ? _mm256_maskload_ps(c + 8, m1) : _mm256_setzero_ps();
  }
  const float* a = g.a + i0 * g.a_row_stride + p0 * g.a_col_stride;
  for (int64_t p = 0; p < pc; ++p) {
    const __m256 b0 = _mm256_load_ps(panel + p * kNR);
    const __m256 b1 = _mm256_load_ps(panel + p * kNR + 8);
    const float* ap = a + p * g.a_col_stride;
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + r * g.a_row_stride);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    float* c = g.c + (i0 + r) * g.ldc + j0;
    _mm256_maskstore_ps(c, m0, acc[r][0]);
    _mm256_maskstore_ps(c + 8, m1, acc[r][1]);
  }
}

using TileFn = void (*)(const GemmArgs&, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                        bool);
constexpr TileFn kTiles[kMR + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

}  // namespace

void gemm_f32_avx2(const GemmArgs& g, int64_t i_begin, int64_t i_end) {
  if (g.k == 0 && !g.accumulate) {
    for (int64_t i = i_begin; i < i_end; ++i) std::fill_n(g.c + i * g.ldc, g.n, 0.0f);
    return;
  }
  alignas(32) float panel[kKC * kNR];
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
