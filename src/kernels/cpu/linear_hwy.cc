// kernels/cpu: the dense linear kernels of linear_cpu.h (y = x w^T + bias, w in F32/BF16/F16)
// written once in Google Highway and compiled for each of its targets (foreach_target.h
// includes this file again per target): a GEMV for decode-sized m and a panel GEMM for
// prefill, both widening w to f32 in registers (bf16 by a shift, f16 by F16C's vcvtph2ps on
// x86) and accumulating in f32, so results differ from kernels/ref only by summation order.
// They replaced the hand-written twins linear_avx512.cc and linear_avx2.cc and keep their
// design: M x R register blocks over 2 vectors of weights per step, f32 panels of 2 vectors of
// columns with MR-row tiles. No heap allocation: the GEMM's panel is on the stack.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

// As in elementwise_hwy.cc: Zen 4 and Ice Lake report AVX3_DL, opt-in in Highway 1.0.3.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/linear_hwy.cc"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cpu/hwy_targets.h"
#include "kernels/cpu/linear_cpu.h"

// Once, not per target (foreach_target.h includes this file again for each).
#ifndef QS_KERNELS_CPU_LINEAR_HWY_ONCE
#define QS_KERNELS_CPU_LINEAR_HWY_ONCE
namespace qs::kernels::cpu {
namespace linear_hwy_detail {

// R rows of w are R interleaved streams, each only k * 2 bytes long (1792 B for a 0.5B model),
// too short for the hardware prefetcher; so every cache line of the rows 16 ahead is
// prefetched into L2 (measured with the hand-written AVX-512 kernel: T1 beat T0, which
// competes with the demand loads for L1 miss buffers; 1-6 blocks ahead were equal; +70 % on
// [4864 x 896], +10 % on [896 x 4864]). Past the last row the prefetches point beyond w,
// which is harmless: they never fault.
constexpr int64_t kGemvPrefetchRows = 16;
inline void prefetch_l2(const void* p) {
  __builtin_prefetch(p, 0, 2);  // locality 2: prefetcht1 on x86
}

// Every k block of the GEMM sweeps all of y (m x n floats, megabytes, so from L3), and each
// tile starts with loads of y that miss; fewer, longer k blocks won: 1024 ran 10-14 % faster
// than 256 at m = 512 (384: 4 %, 512: 8 %, 768: 10 %; Zen 4, hand-written AVX-512 kernel).
constexpr int64_t kKC = 1024;

}  // namespace linear_hwy_detail
}  // namespace qs::kernels::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace qs::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
using linear_hwy_detail::kGemvPrefetchRows;
using linear_hwy_detail::kKC;
using linear_hwy_detail::prefetch_l2;
constexpr size_t kMaxLanes = HWY_LANES(float);

// Register blocking per register file: 32 vector registers on the AVX-512 targets, 16 on the
// others (the numbers of the hand-written kernels, see gemv and micro_kernel).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kGemvRowsM1 = 8;  // rows of w per block when m = 1
constexpr int kGemvRowsX = 4;   // rows of x per block when m > 1 (with 4 rows of w)
constexpr int kMR = 12;         // GEMM tile rows: 24 accumulators + 2 panel vectors + broadcast
constexpr int kGemvStepVectors = 2;  // weight vectors per row of w per GEMV step
#else
// 2 x 4 weight vectors would not fit beside the 8 accumulators and the x vectors; the AVX2
// kernel also loaded one per step (two, each vector's 4 used before the next's loads, ran the
// down GEMV at m = 16 5-14 % behind it in a first version of this port).
constexpr int kGemvStepVectors = 1;
constexpr int kGemvRowsM1 = 4;
constexpr int kGemvRowsX = 2;  // 8 accumulators + 4 weight vectors + 1 x vector of 16
constexpr int kMR = 6;         // 12 accumulators + 2 panel vectors + 1 broadcast of 16
#endif
constexpr int kGemvRows = 4;  // rows of w per block when m > 1

// Loads N consecutive weights as f32 (N = Lanes(d)).
struct F32Weights {
  using T = float;
  static HWY_INLINE V load(D d, const T* p) { return hn::LoadU(d, p); }
  static float scalar(const T* p) { return *p; }
};

struct BF16Weights {
  using T = uint16_t;
  static HWY_INLINE V load(D d, const T* p) {
    const hn::Rebind<hwy::bfloat16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(p)));
  }
  static float scalar(const T* p) { return bf16_to_f32(*p); }
};

struct F16Weights {
  using T = uint16_t;
  static HWY_INLINE V load(D d, const T* p) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
  static float scalar(const T* p) { return f16_to_f32(*p); }
};

// ---- GEMV: M rows of x against R rows of w at a time -----------------------------------
// Each weight vector is loaded once and used for all M rows of x, so w is streamed from
// memory exactly once per call; M * R independent accumulators hide the FMA latency. Two
// vectors of weights per row per step (a whole cache line of bf16 on AVX-512) ran ~5 % faster
// than one on the hand-written AVX-512 kernel; all 2 R are loaded before the step's FMAs, as
// there (a first version of this port, loading each vector's R just before its FMAs, ran the
// f32 GEMV at m = 1 7-10 % behind that kernel; this one 1-5 %, docs/kernels.md).
// Each accumulator adds the step's first vector, then its second, as that kernel did, so AVX3
// results are its bits.
template <class W, int M, int R>
void gemv_block(const LinearArgs& a, int64_t i0, int64_t j) {
  using T = typename W::T;
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const T* w = static_cast<const T*>(a.w) + j * a.k;
  const float* x = a.x + i0 * a.k;
  const int64_t k = a.k;
  const int64_t step = kGemvStepVectors * N;
  const size_t step_bytes = step * sizeof(T);
  V acc[M][R];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[i][r] = hn::Zero(d);
  // One vector of weights per row of w into every accumulator; `wp`/`xp` are where the rows
  // of w and x continue.
  auto one_vector = [&](const T* wp, int64_t w_stride, const float* xp, int64_t x_stride) {
    V wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = W::load(d, wp + r * w_stride);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const V xv = hn::LoadU(d, xp + i * x_stride);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = hn::MulAdd(xv, wv[r], acc[i][r]);
    }
  };
  int64_t kk = 0;
  for (; kk + step <= k; kk += step) {
    const bool prefetch = kk * sizeof(T) % 64 == 0;
    if constexpr (kGemvStepVectors == 2) {
      V lo[R], hi[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        lo[r] = W::load(d, w + r * k + kk);
        hi[r] = W::load(d, w + r * k + kk + N);
        const char* ahead = reinterpret_cast<const char*>(w + (kGemvPrefetchRows + r) * k + kk);
        for (size_t off = 0; prefetch && off < step_bytes; off += 64) prefetch_l2(ahead + off);
      }
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
        const V x0 = hn::LoadU(d, x + i * k + kk);
        const V x1 = hn::LoadU(d, x + i * k + kk + N);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          acc[i][r] = hn::MulAdd(x0, lo[r], acc[i][r]);
          acc[i][r] = hn::MulAdd(x1, hi[r], acc[i][r]);
        }
      }
    } else {
      if (prefetch) {
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const char* ahead = reinterpret_cast<const char*>(w + (kGemvPrefetchRows + r) * k + kk);
          for (size_t off = 0; off < step_bytes; off += 64) prefetch_l2(ahead + off);
        }
      }
      one_vector(w + kk, k, x + kk, k);
    }
  }
  if (kk + N <= k) {
    one_vector(w + kk, k, x + kk, k);
    kk += N;
  }
  if (kk < k) {
    // The last k - kk < N columns from zero-padded copies, so that no byte past a row is read
    // and every lane past k adds 0 * 0.
    HWY_ALIGN T w_tail[R * kMaxLanes] = {};
    HWY_ALIGN float x_tail[M * kMaxLanes] = {};
    const int64_t rest = k - kk;
    for (int r = 0; r < R; ++r) std::memcpy(w_tail + r * N, w + r * k + kk, rest * sizeof(T));
    for (int i = 0; i < M; ++i) std::memcpy(x_tail + i * N, x + i * k + kk, rest * sizeof(float));
    one_vector(w_tail, N, x_tail, N);
  }
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float b = a.bias != nullptr ? a.bias[j + r] : 0.0f;
      a.y[(i0 + i) * a.n + j + r] = hn::GetLane(hn::SumOfLanes(d, acc[i][r])) + b;
    }
  }
}

// One block of R rows of w against all m rows of x, in chunks of at most kGemvRowsX rows: the
// block (R * k * 2 bytes of bf16) comes from DRAM for the first chunk and from L1/L2 for the
// others, so w is still read from memory once, while each FMA needs at most half an x load
// (8 rows of x at R = 2 needed one x load per FMA and ran at half the speed of 4 + 4).
template <class W, int R, int M = kGemvRowsX>
void gemv_rows(const LinearArgs& a, int64_t i0, int64_t j) {
  if constexpr (M > 1) {
    if (a.m - i0 < M) return gemv_rows<W, R, M - 1>(a, i0, j);
  }
  gemv_block<W, M, R>(a, i0, j);
}

template <class W, int R>
void gemv_column_block(const LinearArgs& a, int64_t j) {
  for (int64_t i0 = 0; i0 < a.m; i0 += kGemvRowsX) gemv_rows<W, R>(a, i0, j);
}

template <class W>
void gemv(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  int64_t j = n_begin;
  if (a.m == 1) {
    for (; j + kGemvRowsM1 <= n_end; j += kGemvRowsM1) gemv_block<W, 1, kGemvRowsM1>(a, 0, j);
  } else {
    for (; j + kGemvRows <= n_end; j += kGemvRows) gemv_column_block<W, kGemvRows>(a, j);
  }
  for (; j < n_end; ++j) gemv_column_block<W, 1>(a, j);
}

// ---- GEMM: f32 panels of w, MR x NR register tiles -------------------------------------
// Loop nest (per thread, over its own columns): k in blocks of kKC; inside, NR = 2 vectors of
// columns of w are converted to an f32 panel laid out [kc][NR] (one panel per pass, on the
// stack, kept in L2: 128 KiB on AVX-512), then every MR-row strip of x is multiplied into y
// with MR x NR accumulators.

// In-register transpose: on return r[c] holds column c of the N x N block whose row i was
// r[i]. Each stage puts the even lanes of a pair of rows in one vector and the odd lanes in
// another: as a (row, lane) index of 2 log2(N) bits, that rotates the bits right by one, so
// log2(N) stages swap row and lane (N log2 N two-source permutes: 64 for 16 x 16, as many
// shuffles as the hand-written unpack/shuffle/shuffle_f32x4 sequence).
HWY_INLINE void transpose(D d, V* r) {
#if HWY_TARGET != HWY_SCALAR
  const size_t N = hn::Lanes(d);
  V t[kMaxLanes];
#pragma GCC unroll 4
  for (size_t half = N / 2, stage = 1; stage < N; stage *= 2) {
#pragma GCC unroll 16
    for (size_t i = 0; i < half; ++i) {
      t[i] = hn::ConcatEven(d, r[2 * i + 1], r[2 * i]);
      t[i + half] = hn::ConcatOdd(d, r[2 * i + 1], r[2 * i]);
    }
#pragma GCC unroll 16
    for (size_t i = 0; i < N; ++i) r[i] = t[i];
  }
#else
  (void)d;
  (void)r;
#endif
}

// panel[kk][jj] = w[j0 + jj][kb + kk] as f32 for jj < nr, kk < kc; columns nr..NR-1 zero.
// Full N x N blocks are widened and transposed in registers; edges go element by element.
template <class W>
void pack_panel(const LinearArgs& a, int64_t j0, int64_t nr, int64_t kb, int64_t kc, float* panel) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), nr_full = 2 * N;
  const auto* w = static_cast<const typename W::T*>(a.w) + j0 * a.k + kb;
  const int64_t full_rows = nr / N * N, full_k = kc / N * N;
  for (int64_t jj = 0; jj < full_rows; jj += N) {
    for (int64_t kk = 0; kk < full_k; kk += N) {
      V r[kMaxLanes];
#pragma GCC unroll 16
      for (int64_t i = 0; i < N; ++i) r[i] = W::load(d, w + (jj + i) * a.k + kk);
      transpose(d, r);
#pragma GCC unroll 16
      for (int64_t i = 0; i < N; ++i) hn::Store(r[i], d, panel + (kk + i) * nr_full + jj);
    }
  }
  for (int64_t jj = 0; jj < nr_full; ++jj) {
    const int64_t k_from = jj < full_rows ? full_k : 0;
    for (int64_t kk = k_from; kk < kc; ++kk)
      panel[kk * nr_full + jj] = jj < nr ? W::scalar(w + jj * a.k + kk) : 0.0f;
  }
}

// Pair panels (linear_cpu.h, "Pair panels") widened into the f32 panel at column j0 (a
// multiple of NR, which divides kPanelCols): column c of pair panel p sits in dword c % 16 of
// each 64-byte step, in its low half for c < 16 and its high half otherwise, so each vector
// of the f32 panel is N dwords of one step shifted or masked. Padding columns are zero in the
// pairs already.
void pack_panel_from_pairs(const LinearArgs& a, int64_t j0, int64_t kb, int64_t kc, float* panel) {
  const D d;
  const hn::RebindToUnsigned<D> du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto* pairs = static_cast<const uint16_t*>(a.w) + j0 / kPanelCols * kPanelCols * a.k;
  const auto hi_mask = hn::Set(du, 0xffff0000u);
  for (int64_t half = 0; half < 2; ++half) {
    const int64_t col = j0 % kPanelCols + half * N;  // the first column of this vector
    const auto* dwords = reinterpret_cast<const uint32_t*>(pairs) + col % 16;
    for (int64_t kk = 0; kk < kc; ++kk) {
      const auto v = hn::LoadU(du, dwords + (kb + kk) * (kPanelCols / 2));
      const auto f = col < 16 ? hn::ShiftLeft<16>(v) : hn::And(v, hi_mask);
      hn::Store(hn::BitCast(d, f), d, panel + kk * 2 * N + half * N);
    }
  }
}

// y[R, NR] (+)= x[R, kc] @ panel[kc, NR]; `first` starts from bias[NR] (or zero) instead of
// y. All NR columns of y and bias are addressable (the driver pads partial tiles).
template <int R>
void micro_kernel(const float* x, int64_t ldx, const float* panel, int64_t kc, float* y,
                  int64_t ldy, bool first, const float* bias) {
  const D d;
  const size_t N = hn::Lanes(d);
  V c0[R], c1[R];
  if (first) {
    const V b0 = bias ? hn::LoadU(d, bias) : hn::Zero(d);
    const V b1 = bias ? hn::LoadU(d, bias + N) : hn::Zero(d);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) c0[r] = b0, c1[r] = b1;
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      c0[r] = hn::LoadU(d, y + r * ldy);
      c1[r] = hn::LoadU(d, y + r * ldy + N);
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const V p0 = hn::Load(d, panel + kk * 2 * N);
    const V p1 = hn::Load(d, panel + kk * 2 * N + N);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const V xv = hn::Set(d, x[r * ldx + kk]);
      c0[r] = hn::MulAdd(xv, p0, c0[r]);
      c1[r] = hn::MulAdd(xv, p1, c1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    hn::StoreU(c0[r], d, y + r * ldy);
    hn::StoreU(c1[r], d, y + r * ldy + N);
  }
}

using MicroKernel = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool,
                             const float*);

template <int... Rs>
constexpr auto make_micro_table(std::integer_sequence<int, Rs...>) {
  return std::array<MicroKernel, sizeof...(Rs)>{&micro_kernel<Rs + 1>...};
}
// kMicroKernels[r - 1] handles a strip of r rows.
constexpr auto kMicroKernels = make_micro_table(std::make_integer_sequence<int, kMR>{});

// `pack(j0, nr, kb, kc, panel)` fills one f32 panel.
template <class Pack>
void gemm_with(const LinearArgs& a, int64_t n_begin, int64_t n_end, Pack pack) {
  const D d;
  const int64_t nr_full = static_cast<int64_t>(2 * hn::Lanes(d));
  HWY_ALIGN float panel[kKC * 2 * kMaxLanes];
  for (int64_t kb = 0; kb < a.k; kb += kKC) {
    const int64_t kc = std::min<int64_t>(kKC, a.k - kb);
    for (int64_t j0 = n_begin; j0 < n_end; j0 += nr_full) {
      const int64_t nr = std::min<int64_t>(nr_full, n_end - j0);
      pack(j0, nr, kb, kc, panel);
      const float* bias = a.bias != nullptr ? a.bias + j0 : nullptr;
      // A partial tile (the last nr < NR columns) goes through a padded copy so that the
      // micro-kernel never reads or writes past column n_end.
      HWY_ALIGN float bias_pad[2 * kMaxLanes] = {};
      if (bias != nullptr && nr < nr_full) {
        std::memcpy(bias_pad, bias, sizeof(float) * nr);
        bias = bias_pad;
      }
      for (int64_t i0 = 0; i0 < a.m; i0 += kMR) {
        const int64_t mr = std::min<int64_t>(kMR, a.m - i0);
        const float* x = a.x + i0 * a.k + kb;
        float* y = a.y + i0 * a.n + j0;
        if (nr == nr_full) {
          kMicroKernels[mr - 1](x, a.k, panel, kc, y, a.n, kb == 0, bias);
          continue;
        }
        HWY_ALIGN float tile[kMR * 2 * kMaxLanes];
        if (kb != 0) {
          for (int64_t r = 0; r < mr; ++r)
            std::memcpy(tile + r * nr_full, y + r * a.n, sizeof(float) * nr);
        }
        kMicroKernels[mr - 1](x, a.k, panel, kc, tile, nr_full, kb == 0, bias);
        for (int64_t r = 0; r < mr; ++r)
          std::memcpy(y + r * a.n, tile + r * nr_full, sizeof(float) * nr);
      }
    }
  }
}

template <class W>
void gemm(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  gemm_with(a, n_begin, n_end, [&](int64_t j0, int64_t nr, int64_t kb, int64_t kc, float* panel) {
    pack_panel<W>(a, j0, nr, kb, kc, panel);
  });
}

void LinearGemv(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case DType::kF32:
      return gemv<F32Weights>(a, n_begin, n_end);
    case DType::kBF16:
      return gemv<BF16Weights>(a, n_begin, n_end);
    case DType::kF16:
      return gemv<F16Weights>(a, n_begin, n_end);
    default:
      QS_CHECK_MSG(false, "linear GEMV (linear_hwy.cc): weight dtype not F32/F16/BF16");
  }
}

void LinearGemm(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case DType::kF32:
      return gemm<F32Weights>(a, n_begin, n_end);
    case DType::kBF16:
      return gemm<BF16Weights>(a, n_begin, n_end);
    case DType::kF16:
      return gemm<F16Weights>(a, n_begin, n_end);
    default:
      QS_CHECK_MSG(false, "linear GEMM (linear_hwy.cc): weight dtype not F32/F16/BF16");
  }
}

void LinearGemmPairs(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  gemm_with(a, n_begin, n_end, [&](int64_t j0, int64_t, int64_t kb, int64_t kc, float* panel) {
    pack_panel_from_pairs(a, j0, kb, kc, panel);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace qs::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qs::kernels::cpu {

HWY_EXPORT(LinearGemv);
HWY_EXPORT(LinearGemm);
HWY_EXPORT(LinearGemmPairs);

const LinearKernels& linear_hwy(int64_t target) {
  static const HwyKernelTable<LinearKernels> table = make_hwy_kernel_table([](int64_t t) {
    const size_t i = hwy_table_index(t);
    const LinearKernels k = {HWY_DISPATCH_TABLE(LinearGemv)[i], HWY_DISPATCH_TABLE(LinearGemm)[i],
                             HWY_DISPATCH_TABLE(LinearGemmPairs)[i]};
    QS_CHECK(k.gemv && k.gemm && k.gemm_pairs);
    return k;
  });
  return hwy_kernels(table, target, "not a target linear_hwy.cc is compiled for");
}

}  // namespace qs::kernels::cpu
#endif  // HWY_ONCE
