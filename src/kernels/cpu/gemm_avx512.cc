// kernels/cpu: AVX-512 f32 GEMM (gemm_cpu.h), blocked the way GotoBLAS and BLIS block it. Per
// 256-deep slice of k, the thread packs all of B's slice into 32-column panels (zero past n),
// then, per block of kMC rows, packs A's block into slivers of kMR rows with the rows of each
// k step side by side. The micro-kernel keeps a 12 x 32 tile of C in 24 zmm accumulators, takes
// A's broadcasts from the packed sliver (contiguous, in L2) and B from one panel that stays in
// L1 while every sliver of the row block passes over it. Packing reads A through both of its
// strides, so a transposed A (dW = dY^T X) needs no copy first.
// Why the blocking: the unblocked kernel this replaces re-read each thread's whole strip of A
// (2 MiB at the tuner's 8 x 512 tokens) from L3 for every 32 columns. On the tuner's Qwen3-0.6B
// shapes, one thread of a Zen 4 guest: 64-75 GFLOP/s before, 84-95 after
// (build/bench/gemm_bench --benchmark_filter='avx512/tuner', both binaries alternated, 2026-12-04).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/gemm_cpu.h"

namespace qs::kernels::cpu {
namespace {

constexpr int kMR = 12;
constexpr int64_t kNR = 32;
constexpr int64_t kKC = 256;  // 256 x 32 floats of B = 32 KiB, one panel, L1-resident
constexpr int64_t kMC = 192;  // 192 x 256 floats of A = 192 KiB, one row block, L2-resident
static_assert(kMC % kMR == 0, "a row block is whole slivers");

int64_t panels(int64_t n) {
  return (n + kNR - 1) / kNR;
}

// B[p0 : p0 + pc, :] as panels of kNR columns, each pc x kNR, columns past n zero.
void pack_b(const GemmArgs& g, int64_t p0, int64_t pc, float* out) {
  for (int64_t j0 = 0; j0 < g.n; j0 += kNR) {
    const int64_t cols = std::min(kNR, g.n - j0);
    float* panel = out + (j0 / kNR) * pc * kNR;
    for (int64_t p = 0; p < pc; ++p) {
      const float* src = g.b + (p0 + p) * g.ldb + j0;
      std::copy_n(src, cols, panel + p * kNR);
      std::fill(panel + p * kNR + cols, panel + (p + 1) * kNR, 0.0f);
    }
  }
}

// A[i0 : i0 + rows, p0 : p0 + pc] as slivers of kMR rows, each pc x kMR with element (p, r) at
// p * kMR + r; rows past the block are zero.
void pack_a(const GemmArgs& g, int64_t i0, int64_t rows, int64_t p0, int64_t pc, float* out) {
  for (int64_t s = 0; s < rows; s += kMR) {
    const int64_t live = std::min<int64_t>(kMR, rows - s);
    float* sliver = out + s * pc;
    const float* a = g.a + (i0 + s) * g.a_row_stride + p0 * g.a_col_stride;
    if (g.a_col_stride == 1) {  // row-major: read each row along k
      for (int64_t r = 0; r < live; ++r) {
        const float* row = a + r * g.a_row_stride;
        for (int64_t p = 0; p < pc; ++p) sliver[p * kMR + r] = row[p];
      }
    } else {  // transposed or strided: read each k step across the rows
      for (int64_t p = 0; p < pc; ++p) {
        const float* col = a + p * g.a_col_stride;
        for (int64_t r = 0; r < live; ++r) sliver[p * kMR + r] = col[r * g.a_row_stride];
      }
    }
    if (live < kMR) {
      for (int64_t p = 0; p < pc; ++p) std::fill_n(sliver + p * kMR + live, kMR - live, 0.0f);
    }
  }
}

// C[rows x cols tile] (+)= sliver * panel over pc steps. Rows past `rows` are computed on the
// sliver's zero padding and not stored. `c_next` is the tile the caller computes next: its
// lines are requested now, so that they arrive while this tile computes (C is too big for any
// cache and its tiles are far apart; fetched on demand, each tile would start with a stall).
void micro_kernel(const float* sliver, const float* panel, int64_t pc, float* c, int64_t ldc,
                  int64_t rows, int64_t cols, bool load_c, const float* c_next) {
  if (c_next != nullptr) {
#pragma GCC unroll 12
    for (int r = 0; r < kMR; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(c_next + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c_next + r * ldc + 16), _MM_HINT_T0);
    }
  }
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32   ? __mmask16(0xffff)
                       : cols <= 16 ? __mmask16(0)
                                    : __mmask16((1u << (cols - 16)) - 1);
  __m512 acc[kMR][2];
#pragma GCC unroll 12
  for (int r = 0; r < kMR; ++r) {
    const bool live = load_c && r < rows;
    acc[r][0] = live ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    acc[r][1] = live ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < pc; ++p) {
    const __m512 b0 = _mm512_load_ps(panel + p * kNR);
    const __m512 b1 = _mm512_load_ps(panel + p * kNR + 16);
    const float* ap = sliver + p * kMR;
#pragma GCC unroll 12
    for (int r = 0; r < kMR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < kMR; ++r) {
    if (r >= rows) break;
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}

}  // namespace

int64_t gemm_f32_avx512_scratch_floats(const GemmArgs& g) {
  return panels(g.n) * kNR * kKC + kMC * kKC + 16;  // + 16: room to align to 64 bytes
}

void gemm_f32_avx512(const GemmArgs& g, int64_t i_begin, int64_t i_end, float* scratch) {
  if (g.k == 0 && !g.accumulate) {
    for (int64_t i = i_begin; i < i_end; ++i) std::fill_n(g.c + i * g.ldc, g.n, 0.0f);
    return;
  }
  float* b_pack =
      reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
  float* a_pack = b_pack + panels(g.n) * kNR * kKC;
  for (int64_t p0 = 0; p0 < g.k; p0 += kKC) {
    const int64_t pc = std::min(kKC, g.k - p0);
    const bool load_c = g.accumulate || p0 > 0;
    pack_b(g, p0, pc, b_pack);
    for (int64_t i0 = i_begin; i0 < i_end; i0 += kMC) {
      const int64_t rows = std::min(kMC, i_end - i0);
      pack_a(g, i0, rows, p0, pc, a_pack);
      for (int64_t j0 = 0; j0 < g.n; j0 += kNR) {
        const float* panel = b_pack + (j0 / kNR) * pc * kNR;
        const int64_t cols = std::min(kNR, g.n - j0);
        for (int64_t s = 0; s < rows; s += kMR) {
          // The next tile down the column strip, or the top of the next strip; prefetching
          // rows past the block's end is harmless (a hint, never a fault), but past C is not
          // worth computing an address for.
          const int64_t next_row = s + kMR < rows ? i0 + s + kMR : i0;
          const int64_t next_col = s + kMR < rows ? j0 : j0 + kNR;
          const float* c_next = next_col < g.n && next_row + kMR <= i_end
                                    ? g.c + next_row * g.ldc + next_col
                                    : nullptr;
          micro_kernel(a_pack + s * pc, panel, pc, g.c + (i0 + s) * g.ldc + j0, g.ldc,
                       std::min<int64_t>(kMR, rows - s), cols, load_c, c_next);
        }
      }
    }
  }
}

}  // namespace qs::kernels::cpu
