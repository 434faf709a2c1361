// kernels/cpu: the f32 GEMM (gemm_cpu.h) written once in Google Highway and compiled for each of
// its targets (foreach_target.h includes this file again per target), blocked the way GotoBLAS
// and BLIS block it. Per 256-deep slice of k, the thread packs all of B's slice into panels of
// two vectors of columns (zero past n), then, per block of kMC rows, packs A's block into
// slivers of kMR rows with the rows of each k step side by side. The micro-kernel keeps a
// kMR x 2-vector tile of C in registers, broadcasts A from the packed sliver (contiguous, in L2)
// and reads B from one panel that stays in L1 while every sliver of the row block passes over
// it. Packing reads A and B through both of their strides, so a transposed operand needs no
// copy first.
// The tile is as tall as the registers allow: 12 x 2 vectors (24 accumulators of 32 registers)
// on the AVX-512 targets, 6 x 2 (12 of 16) elsewhere. Edge tiles (rows or columns past C) run
// the same full-tile code on a copy in a local buffer, so the hot loop has no masks.
// Why the blocking: the unblocked AVX-512 kernel it descends from re-read each thread's whole
// strip of A (2 MiB at the tuner's 8 x 512 tokens) from L3 for every 32 columns. On the tuner's
// Qwen3-0.6B shapes, one thread of a Zen 4 guest: 64-75 GFLOP/s before, 84-95 after.
#include <algorithm>
#include <cstddef>
#include <cstdint>

// As in elementwise_hwy.cc: Zen 4 and Ice Lake report AVX3_DL, opt-in in Highway 1.0.3.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gemm_hwy.cc"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <hwy/cache_control.h>

#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/hwy_targets.h"

// Once, not per target (foreach_target.h includes this file again for each).
#ifndef QS_KERNELS_CPU_GEMM_HWY_ONCE
#define QS_KERNELS_CPU_GEMM_HWY_ONCE
namespace qs::kernels::cpu {
namespace gemm_hwy_detail {

constexpr int64_t kKC = 256;    // 256 x 32 floats of B = 32 KiB, one AVX-512 panel, L1-resident
constexpr int64_t kMC = 192;    // 192 x 256 floats of A = 192 KiB, one row block, L2-resident
constexpr int64_t kMaxNR = 32;  // the widest panel: two 512-bit vectors

}  // namespace gemm_hwy_detail
}  // namespace qs::kernels::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace qs::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
using gemm_hwy_detail::kKC;
using gemm_hwy_detail::kMC;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kMR = 12;
#else
constexpr int kMR = 6;
#endif
static_assert(kMC % kMR == 0, "a row block is whole slivers");
constexpr int64_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
static_assert(2 * kMaxLanes <= gemm_hwy_detail::kMaxNR, "scratch sized for 32-column panels");

// B[p0 : p0 + pc, :] as panels of nr columns, each pc x nr, columns past n zero.
void pack_b(const GemmArgs& g, int64_t nr, int64_t p0, int64_t pc, float* out) {
  for (int64_t j0 = 0; j0 < g.n; j0 += nr) {
    const int64_t cols = std::min(nr, g.n - j0);
    float* panel = out + (j0 / nr) * pc * nr;
    if (g.b_col_stride == 1) {
      for (int64_t p = 0; p < pc; ++p) {
        const float* src = g.b + (p0 + p) * g.ldb + j0;
        std::copy_n(src, cols, panel + p * nr);
        std::fill(panel + p * nr + cols, panel + (p + 1) * nr, 0.0f);
      }
    } else {
      // B^T stored (x W^T): each column along k, 16 steps at a time, so that the panel rows
      // written (16 x nr floats) and the source lines read (one per column) stay in L1.
      constexpr int64_t kSteps = 16;
      for (int64_t q = 0; q < pc; q += kSteps) {
        const int64_t steps = std::min(kSteps, pc - q);
        for (int64_t j = 0; j < cols; ++j) {
          const float* src = g.b + (p0 + q) * g.ldb + (j0 + j) * g.b_col_stride;
          for (int64_t p = 0; p < steps; ++p) panel[(q + p) * nr + j] = src[p * g.ldb];
        }
      }
      for (int64_t p = 0; p < pc; ++p) std::fill(panel + p * nr + cols, panel + (p + 1) * nr, 0.0f);
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

// A whole kMR x 2-vector tile of C (+)= sliver * panel over pc steps. `c_next` is the tile the
// caller computes next: its lines are requested now, so that they arrive while this tile
// computes (C is too big for any cache and its tiles are far apart; fetched on demand, each
// tile would start with a stall). The accumulators are an array indexed only by unrolled
// constants, which GCC keeps in registers (checked in the object file: no spills in the loop).
HWY_INLINE void micro_kernel(D d, const float* HWY_RESTRICT sliver, const float* HWY_RESTRICT panel,
                             int64_t pc, float* c, int64_t ldc, bool load_c, const float* c_next) {
  const size_t N = hn::Lanes(d);
  if (c_next != nullptr) {
#pragma GCC unroll 12
    for (int r = 0; r < kMR; ++r) {
      hwy::Prefetch(c_next + r * ldc);
      hwy::Prefetch(c_next + r * ldc + 2 * N - 1);
    }
  }
  V acc0[kMR], acc1[kMR];
#pragma GCC unroll 12
  for (int r = 0; r < kMR; ++r) {
    acc0[r] = load_c ? hn::LoadU(d, c + r * ldc) : hn::Zero(d);
    acc1[r] = load_c ? hn::LoadU(d, c + r * ldc + N) : hn::Zero(d);
  }
  for (int64_t p = 0; p < pc; ++p) {
    const V b0 = hn::Load(d, panel + p * 2 * N);
    const V b1 = hn::Load(d, panel + p * 2 * N + N);
    const float* ap = sliver + p * kMR;
#pragma GCC unroll 12
    for (int r = 0; r < kMR; ++r) {
      const V av = hn::Set(d, ap[r]);
      acc0[r] = hn::MulAdd(av, b0, acc0[r]);
      acc1[r] = hn::MulAdd(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < kMR; ++r) {
    hn::StoreU(acc0[r], d, c + r * ldc);
    hn::StoreU(acc1[r], d, c + r * ldc + N);
  }
}

// A tile cut by the edge of C: the full-tile code on a copy, then the live part written back.
HWY_NOINLINE void edge_tile(D d, const float* sliver, const float* panel, int64_t pc, float* c,
                            int64_t ldc, int64_t rows, int64_t cols, bool load_c) {
  const int64_t nr = static_cast<int64_t>(2 * hn::Lanes(d));
  HWY_ALIGN float buf[kMR * 2 * kMaxLanes] = {};
  if (load_c) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(c + r * ldc, cols, buf + r * nr);
  }
  micro_kernel(d, sliver, panel, pc, buf, nr, load_c, nullptr);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(buf + r * nr, cols, c + r * ldc);
}

void GemmF32(const GemmArgs& g, int64_t i_begin, int64_t i_end, float* scratch) {
  if (g.k == 0 && !g.accumulate) {
    for (int64_t i = i_begin; i < i_end; ++i) std::fill_n(g.c + i * g.ldc, g.n, 0.0f);
    return;
  }
  const D d;
  const int64_t nr = static_cast<int64_t>(2 * hn::Lanes(d));
  float* b_pack =
      reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
  float* a_pack = b_pack + (g.n + nr - 1) / nr * nr * kKC;
  for (int64_t p0 = 0; p0 < g.k; p0 += kKC) {
    const int64_t pc = std::min(kKC, g.k - p0);
    const bool load_c = g.accumulate || p0 > 0;
    pack_b(g, nr, p0, pc, b_pack);
    for (int64_t i0 = i_begin; i0 < i_end; i0 += kMC) {
      const int64_t rows = std::min(kMC, i_end - i0);
      pack_a(g, i0, rows, p0, pc, a_pack);
      for (int64_t j0 = 0; j0 < g.n; j0 += nr) {
        const float* panel = b_pack + (j0 / nr) * pc * nr;
        const int64_t cols = std::min(nr, g.n - j0);
        for (int64_t s = 0; s < rows; s += kMR) {
          const float* sliver = a_pack + s * pc;
          float* c = g.c + (i0 + s) * g.ldc + j0;
          const int64_t live = std::min<int64_t>(kMR, rows - s);
          if (live < kMR || cols < nr) {
            edge_tile(d, sliver, panel, pc, c, g.ldc, live, cols, load_c);
            continue;
          }
          // The next tile down the column strip, or the top of the next strip; prefetching
          // rows past the block's end is harmless (a hint, never a fault), but past C is not
          // worth computing an address for.
          const int64_t next_row = s + kMR < rows ? i0 + s + kMR : i0;
          const int64_t next_col = s + kMR < rows ? j0 : j0 + nr;
          const float* c_next = next_col < g.n && next_row + kMR <= i_end
                                    ? g.c + next_row * g.ldc + next_col
                                    : nullptr;
          micro_kernel(d, sliver, panel, pc, c, g.ldc, load_c, c_next);
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qs::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qs::kernels::cpu {

HWY_EXPORT(GemmF32);

int64_t gemm_f32_hwy_scratch_floats(const GemmArgs& g) {
  using namespace gemm_hwy_detail;
  // Every target's panels fit in the widest target's: ceil(n / nr) nr <= ceil(n / 32) 32.
  return (g.n + kMaxNR - 1) / kMaxNR * kMaxNR * kKC + kMC * kKC + 16;  // + 16: to align
}

GemmF32Kernel gemm_f32_hwy(int64_t target) {
  return hwy_table_entry(HWY_DISPATCH_TABLE(GemmF32), target,
                         "not a target gemm_hwy.cc is compiled for");
}

}  // namespace qs::kernels::cpu
#endif  // HWY_ONCE
