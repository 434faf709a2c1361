// kernels/cpu: the GEMM of gemm_cpu.h with bf16 products, C (+)= bf16(A) * bf16(B) with f32
// accumulation, through AVX512-BF16's vdpbf16ps: what torch computes for a matmul under bf16
// autocast (the auto-round tool's CPU default), at twice the f32 FMA rate on Zen 4 (234 against
// 117 G multiply-adds/s a core, build/bench/peak_bench).
// Blocked as the f32 kernel (gemm_hwy.cc) is, with the operands rounded to bf16 (nearest even)
// while they are packed and laid out in the pairs along k that vdpbf16ps multiplies: a dword of B's
// panel holds B(p, j) and B(p + 1, j), a dword of A's sliver A(i, p) and A(i, p + 1), an odd k
// padded with a zero. One 512-deep slice of B's panel is 32 KiB (L1); a row block of A, 192 x 512,
// 192 KiB (L2). Packing reads both operands through both strides, so x * W^T and dY^T * X need no
// copy. GCC 12 reports the _mm512_undefined_* inside its own cast intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/gemm_cpu.h"

namespace qs::kernels::cpu {
namespace {

constexpr int kMR = 12;
constexpr int64_t kNR = 32;
constexpr int64_t kKC = 512;  // k elements per slice: kKC / 2 pair steps
constexpr int64_t kMC = 192;
static_assert(kMC % kMR == 0, "a row block is whole slivers");

int64_t panels(int64_t n) {
  return (n + kNR - 1) / kNR;
}

uint32_t pair(float even, float odd) {
  return uint32_t{f32_to_bf16(even)} | (uint32_t{f32_to_bf16(odd)} << 16);
}

// 32 consecutive floats as 16 bf16 pairs, rounded to nearest even like f32_to_bf16 (NaN
// payloads aside, which no product here carries).
void pairs16(const float* src, uint32_t* out) {
  const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 16), _mm512_loadu_ps(src));
  _mm512_storeu_si512(out, reinterpret_cast<__m512i>(h));
}

// out[t] = pair(even[t], odd[t]) for t < count <= 16 (odd == nullptr: zeros), rounded like
// pairs16: a step of pairs whose two k values lie in two contiguous runs (a transposed A, a
// row-major B).
void interleave16(const float* even, const float* odd, int64_t count, uint32_t* out) {
  const __mmask16 live = count >= 16 ? __mmask16(0xffff) : __mmask16((1u << count) - 1);
  const __m512 e = _mm512_maskz_loadu_ps(live, even);
  const __m512 o = odd != nullptr ? _mm512_maskz_loadu_ps(live, odd) : _mm512_setzero_ps();
  // One conversion rounds both: words 0-15 are e's, 16-31 o's.
  const __m512i h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(o, e));
  const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(h));
  const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1));
  _mm512_mask_storeu_epi32(out, live, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
}

// B[p0 : p0 + pc, :] as panels of kNR columns, each ceil(pc / 2) pair steps x kNR dwords.
void pack_b(const GemmArgs& g, int64_t p0, int64_t pc, uint32_t* out) {
  const int64_t steps = (pc + 1) / 2;
  for (int64_t j0 = 0; j0 < g.n; j0 += kNR) {
    const int64_t cols = std::min(kNR, g.n - j0);
    uint32_t* panel = out + (j0 / kNR) * steps * kNR;
    if (g.ldb == 1) {  // each column contiguous along k (B = W^T)
      alignas(64) uint32_t buf[16];
      for (int64_t c = 0; c < cols; ++c) {
        const float* col = g.b + p0 + (j0 + c) * g.b_col_stride;
        int64_t s = 0;
        for (; 2 * s + 32 <= pc; s += 16) {
          pairs16(col + 2 * s, buf);
          for (int t = 0; t < 16; ++t) panel[(s + t) * kNR + c] = buf[t];
        }
        for (; s < steps; ++s) {
          const float odd = 2 * s + 1 < pc ? col[2 * s + 1] : 0.0f;
          panel[s * kNR + c] = pair(col[2 * s], odd);
        }
      }
    } else if (g.b_col_stride == 1) {  // row-major: each k step contiguous along the columns
      for (int64_t s = 0; s < steps; ++s) {
        const float* even = g.b + (p0 + 2 * s) * g.ldb + j0;
        const float* odd = 2 * s + 1 < pc ? even + g.ldb : nullptr;
        for (int64_t c = 0; c < cols; c += 16) {
          interleave16(even + c, odd != nullptr ? odd + c : nullptr,
                       std::min<int64_t>(16, cols - c), panel + s * kNR + c);
        }
      }
    } else {
      for (int64_t s = 0; s < steps; ++s) {
        const float* even = g.b + (p0 + 2 * s) * g.ldb + j0 * g.b_col_stride;
        const float* odd = 2 * s + 1 < pc ? even + g.ldb : nullptr;
        for (int64_t c = 0; c < cols; ++c) {
          panel[s * kNR + c] =
              pair(even[c * g.b_col_stride], odd != nullptr ? odd[c * g.b_col_stride] : 0.0f);
        }
      }
    }
    if (cols < kNR) {
      for (int64_t s = 0; s < steps; ++s)
        std::fill(panel + s * kNR + cols, panel + (s + 1) * kNR, 0u);
    }
  }
}

// A[i0 : i0 + rows, p0 : p0 + pc] as slivers of kMR rows, each kMR x ceil(pc / 2) dwords; rows
// past the block are zero. A row-major A keeps its rows apart (dword (r, s) at r * steps + s:
// each row converts with whole-vector stores, and the micro-kernel broadcasts from kMR short
// streams); any other A interleaves them (at s * kMR + r), so that each pair step is one
// contiguous run of the rows. Returns whether the rows are apart.
bool pack_a(const GemmArgs& g, int64_t i0, int64_t rows, int64_t p0, int64_t pc, uint32_t* out) {
  const int64_t steps = (pc + 1) / 2;
  for (int64_t s0 = 0; s0 < rows; s0 += kMR) {
    const int64_t live = std::min<int64_t>(kMR, rows - s0);
    uint32_t* sliver = out + s0 * steps;
    const float* a = g.a + (i0 + s0) * g.a_row_stride + p0 * g.a_col_stride;
    if (g.a_col_stride == 1) {  // row-major: each row along k
      for (int64_t r = 0; r < live; ++r) {
        const float* row = a + r * g.a_row_stride;
        uint32_t* dst = sliver + r * steps;
        int64_t s = 0;
        for (; 2 * s + 32 <= pc; s += 16) pairs16(row + 2 * s, dst + s);
        for (; s < steps; ++s) dst[s] = pair(row[2 * s], 2 * s + 1 < pc ? row[2 * s + 1] : 0.0f);
      }
      if (live < kMR) std::fill_n(sliver + live * steps, (kMR - live) * steps, 0u);
      continue;
    } else if (g.a_row_stride == 1) {  // transposed: each k step contiguous across the rows
      for (int64_t s = 0; s < steps; ++s) {
        const float* even = a + 2 * s * g.a_col_stride;
        interleave16(even, 2 * s + 1 < pc ? even + g.a_col_stride : nullptr, live,
                     sliver + s * kMR);
      }
    } else {  // strided both ways: each pair of k steps across the rows
      for (int64_t s = 0; s < steps; ++s) {
        const float* even = a + 2 * s * g.a_col_stride;
        const float* odd = 2 * s + 1 < pc ? even + g.a_col_stride : nullptr;
        for (int64_t r = 0; r < live; ++r) {
          sliver[s * kMR + r] =
              pair(even[r * g.a_row_stride], odd != nullptr ? odd[r * g.a_row_stride] : 0.0f);
        }
      }
    }
    if (live < kMR) {
      for (int64_t s = 0; s < steps; ++s) std::fill_n(sliver + s * kMR + live, kMR - live, 0u);
    }
  }
  return g.a_col_stride == 1;
}

__m512bh as_bh(__m512i v) {
  return reinterpret_cast<__m512bh>(v);
}

// C[rows x cols tile] (+)= sliver * panel over `steps` pair steps; as gemm_hwy.cc's. kRowsApart:
// the sliver's layout (pack_a).
template <bool kRowsApart>
void micro_kernel(const uint32_t* sliver, const uint32_t* panel, int64_t steps, float* c,
                  int64_t ldc, int64_t rows, int64_t cols, bool load_c, const float* c_next) {
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
  for (int64_t s = 0; s < steps; ++s) {
    const __m512bh b0 = as_bh(_mm512_load_si512(panel + s * kNR));
    const __m512bh b1 = as_bh(_mm512_load_si512(panel + s * kNR + 16));
    const uint32_t* ap = kRowsApart ? sliver + s : sliver + s * kMR;
#pragma GCC unroll 12
    for (int r = 0; r < kMR; ++r) {
      const uint32_t a = kRowsApart ? ap[r * steps] : ap[r];
      const __m512bh av = as_bh(_mm512_set1_epi32(static_cast<int>(a)));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
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

bool gemm_bf16_avx512_supported() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

int64_t gemm_bf16_avx512_scratch_dwords(const GemmArgs& g) {
  return (panels(g.n) * kNR + kMC) * (kKC / 2) + 16;  // + 16: room to align to 64 bytes
}

void gemm_bf16_avx512(const GemmArgs& g, int64_t i_begin, int64_t i_end, uint32_t* scratch) {
  if (g.k == 0 && !g.accumulate) {
    for (int64_t i = i_begin; i < i_end; ++i) std::fill_n(g.c + i * g.ldc, g.n, 0.0f);
    return;
  }
  uint32_t* b_pack =
      reinterpret_cast<uint32_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
  uint32_t* a_pack = b_pack + panels(g.n) * kNR * (kKC / 2);
  for (int64_t p0 = 0; p0 < g.k; p0 += kKC) {
    const int64_t pc = std::min(kKC, g.k - p0);
    const int64_t steps = (pc + 1) / 2;
    const bool load_c = g.accumulate || p0 > 0;
    pack_b(g, p0, pc, b_pack);
    for (int64_t i0 = i_begin; i0 < i_end; i0 += kMC) {
      const int64_t rows = std::min(kMC, i_end - i0);
      const bool rows_apart = pack_a(g, i0, rows, p0, pc, a_pack);
      for (int64_t j0 = 0; j0 < g.n; j0 += kNR) {
        const uint32_t* panel = b_pack + (j0 / kNR) * steps * kNR;
        const int64_t cols = std::min(kNR, g.n - j0);
        for (int64_t s = 0; s < rows; s += kMR) {
          const int64_t next_row = s + kMR < rows ? i0 + s + kMR : i0;
          const int64_t next_col = s + kMR < rows ? j0 : j0 + kNR;
          const float* c_next = next_col < g.n && next_row + kMR <= i_end
                                    ? g.c + next_row * g.ldc + next_col
                                    : nullptr;
          auto* kernel = rows_apart ? micro_kernel<true> : micro_kernel<false>;
          kernel(a_pack + s * steps, panel, steps, g.c + (i0 + s) * g.ldc + j0, g.ldc,
                 std::min<int64_t>(kMR, rows - s), cols, load_c, c_next);
        }
      }
    }
  }
}

}  // namespace qs::kernels::cpu
