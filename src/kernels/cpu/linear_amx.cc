// kernels/cpu: the AMX bf16 GEMM for bf16 weights (prefill, kernels::amx_active()). The
// weight rows are AMX A tiles as they lie ([n, k] row-major: a tile row is 32 bf16 of one
// output column); x is split once per call into three bf16 terms whose sum is x exactly, and
// packed as the B operand, k-pairs of 16 tokens per 64-byte row. TDPBF16PS multiplies bf16
// pairs exactly and accumulates in f32 across the whole of k in the tiles, so results differ
// from ref::linear only by float summation order (3k exact products instead of k), like the
// other dense kernels: prefill and decode of the same tokens agree whatever the batch. The
// tile unit flushes denormal inputs and outputs to zero.
// Compiled with the AVX-512 flags plus AMX-TILE/INT8/BF16 (file suffix _amx.cc).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "core/check.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/qlinear_panel_avx512.h"  // transpose16

namespace qs::kernels::cpu {
namespace {

constexpr int kTile = 16;     // rows of a tile; also tokens per B tile
constexpr int kTileK = 32;    // bf16 inputs per tile product
constexpr int kParts = 3;     // bf16 terms per activation: hi + mid + lo = the f32 value
constexpr int64_t kKc = 256;  // inputs per k block (see linear_gemm_amx_bf16)

// Tiles 0, 1: A (cols0 / cols1 weight rows x 32 bf16); 2, 3: B (16 k-pairs x 16 tokens);
// 4..7: C (columns x 16 tokens f32), C[4 + 2a + b] = A_a x B_b.
void configure_tiles(int cols0, int cols1) {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  const int cols[2] = {cols0, std::max(cols1, 1)};
  for (int a = 0; a < 2; ++a) {
    cfg.rows[a] = static_cast<uint8_t>(cols[a]);
    cfg.colsb[a] = 64;
    for (int b = 0; b < 2; ++b) {
      cfg.rows[4 + 2 * a + b] = static_cast<uint8_t>(cols[a]);
      cfg.colsb[4 + 2 * a + b] = 64;
    }
  }
  for (int t : {2, 3}) {
    cfg.rows[t] = kTileK / 2;
    cfg.colsb[t] = 64;
  }
  load_tile_config(cfg);
}

inline __m512 widen_bf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// x [m, k] f32 -> three bf16 planes xp[part][k / 2][m_pad][2] (tokens past m are zero): row r
// of a B tile is the k-pair r of 16 consecutive tokens. x = hi + mid + lo exactly: each part
// is the residual of the parts before it rounded to bf16, and 3 x 8 significand bits cover
// f32's 24 (residuals below bf16's normal range are lost, as the tile unit flushes them).
void pack_x(const float* x, int64_t m, int64_t k, int64_t m_pad, uint16_t* xp) {
  const auto plane = static_cast<size_t>(k / 2 * m_pad * 2);
  for (int64_t i0 = 0; i0 < m_pad; i0 += kTile) {
    for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
      __m512i r[kParts][16];
      for (int t = 0; t < kTile; ++t) {
        const int64_t i = i0 + t;
        __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
        if (i < m) {
          lo = _mm512_loadu_ps(x + i * k + k0);
          hi = _mm512_loadu_ps(x + i * k + k0 + 16);
        }
        for (int part = 0; part < kParts; ++part) {
          // Element order: the second argument fills the low half.
          const __m512i b = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
          r[part][t] = b;
          // The residual, exact in f32: x minus its bf16 rounding (bf16 -> f32 is a shift).
          lo = _mm512_sub_ps(lo, widen_bf16(_mm512_castsi512_si256(b)));
          hi = _mm512_sub_ps(hi, widen_bf16(_mm512_extracti64x4_epi64(b, 1)));
        }
      }
      for (int part = 0; part < kParts; ++part) {
        transpose16(r[part]);  // r[part][pair] = that k-pair of the 16 tokens
        for (int pair = 0; pair < kTileK / 2; ++pair) {
          _mm512_storeu_si512(xp + part * plane + ((k0 / 2 + pair) * m_pad + i0) * 2,
                              r[part][pair]);
        }
      }
    }
  }
}

// y[tokens i0.., columns j0..] from the C tiles: C is [column][token], y is [token][column].
void store_tile(const float* c, int cols, int64_t i0, int64_t m, int64_t j0,
                const LinearArgs& args) {
  __m512i r[16];
  for (int j = 0; j < kTile; ++j) r[j] = _mm512_load_si512(c + j * kTile);
  transpose16(r);  // r[token] = that token's 16 columns
  const __mmask16 mk = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
  const __m512 bias =
      args.bias != nullptr ? _mm512_maskz_loadu_ps(mk, args.bias + j0) : _mm512_setzero_ps();
  for (int t = 0; t < kTile && i0 + t < m; ++t) {
    _mm512_mask_storeu_ps(args.y + (i0 + t) * args.n + j0, mk,
                          _mm512_add_ps(_mm512_castsi512_ps(r[t]), bias));
  }
}

// Columns [j0, j0 + 16 + cols1) x tokens [i0, i0 + 16 (+ 16 with kB1)), inputs [k_begin,
// k_end). The four C tiles start at zero (first k block) or from `acc`, and end in `acc`
// or, after the last k block, in y.
template <bool kA1, bool kB1>
void tile_block(const LinearArgs& args, const uint16_t* xp, int64_t m_pad, int64_t j0, int cols0,
                int cols1, int64_t i0, int64_t k_begin, int64_t k_end, bool first, bool last,
                bool prefetch, float* acc) {
  const auto* w = static_cast<const uint16_t*>(args.w);
  const int64_t k = args.k;
  const auto w_stride = static_cast<size_t>(k * 2);
  const auto x_stride = static_cast<size_t>(m_pad * 4);
  float* c[4] = {acc, acc + 256, acc + 512, acc + 768};
  if (first) {
    _tile_zero(4);
    if constexpr (kB1) _tile_zero(5);
    if constexpr (kA1) _tile_zero(6);
    if constexpr (kA1 && kB1) _tile_zero(7);
  } else {
    _tile_loadd(4, c[0], 64);
    if constexpr (kB1) _tile_loadd(5, c[1], 64);
    if constexpr (kA1) _tile_loadd(6, c[2], 64);
    if constexpr (kA1 && kB1) _tile_loadd(7, c[3], 64);
  }
  const auto plane = static_cast<size_t>(k / 2 * m_pad * 2);
  // The next panel's 32 rows, one cache line each per step, into L2: a tile load touches 16
  // rows at once, and the hardware prefetcher does not follow 32 short strided streams (the
  // 151936 x 896 lm_head at m = 16 streamed 4 GB/s without this and the single k block).
  const int64_t ahead = std::min(j0 + 2 * kTile, args.n - 2 * kTile);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kTileK) {
    if (prefetch && ahead > j0) {
      const auto* next = reinterpret_cast<const char*>(w + ahead * k + k0);
#pragma GCC unroll 32
      for (int r = 0; r < 2 * kTile; ++r) _mm_prefetch(next + r * w_stride, _MM_HINT_T1);
    }
    _tile_loadd(0, w + j0 * k + k0, w_stride);
    if constexpr (kA1) _tile_loadd(1, w + (j0 + kTile) * k + k0, w_stride);
    for (int part = 0; part < kParts; ++part) {
      const uint16_t* b = xp + part * plane + (k0 / 2 * m_pad + i0) * 2;
      _tile_loadd(2, b, x_stride);
      if constexpr (kB1) _tile_loadd(3, b + kTile * 2, x_stride);
      _tile_dpbf16ps(4, 0, 2);
      if constexpr (kB1) _tile_dpbf16ps(5, 0, 3);
      if constexpr (kA1) _tile_dpbf16ps(6, 1, 2);
      if constexpr (kA1 && kB1) _tile_dpbf16ps(7, 1, 3);
    }
  }
  _tile_stored(4, c[0], 64);
  if constexpr (kB1) _tile_stored(5, c[1], 64);
  if constexpr (kA1) _tile_stored(6, c[2], 64);
  if constexpr (kA1 && kB1) _tile_stored(7, c[3], 64);
  if (!last) return;
  const int64_t m = args.m;
  store_tile(c[0], cols0, i0, m, j0, args);
  if constexpr (kB1) store_tile(c[1], cols0, i0 + kTile, m, j0, args);
  if constexpr (kA1) store_tile(c[2], cols1, i0, m, j0 + kTile, args);
  if constexpr (kA1 && kB1) store_tile(c[3], cols1, i0 + kTile, m, j0 + kTile, args);
}

// Per-thread scratch that only grows, never freed (like the int8 activations of
// ops/linear.cc), so prefill allocates only on its first, largest call: the packed x and the
// f32 accumulators between k blocks.
template <typename T, int kSlot>
T* scratch(size_t elems) {
  struct Scratch {
    std::unique_ptr<T, decltype(&std::free)> data{nullptr, &std::free};
    size_t elems = 0;
  };
  thread_local Scratch s;
  if (s.elems < elems) {
    const size_t bytes = (elems * sizeof(T) + 63) / 64 * 64;
    s.data.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    // Out of memory, not a bug: ThreadPool hands the exception to the caller.
    if (s.data == nullptr) throw std::bad_alloc();
    s.elems = bytes / sizeof(T);
  }
  return s.data.get();
}

}  // namespace

bool linear_amx_bf16_supports(const LinearArgs& a) {
  return a.w_dtype == DType::kBF16 && a.k > 0 && a.k % kTileK == 0;
}

void linear_gemm_amx_bf16(const LinearArgs& args, int64_t n_begin, int64_t n_end) {
  QS_CHECK(linear_amx_bf16_supports(args));
  const int64_t m = args.m;
  if (m == 0 || n_begin >= n_end) return;
  const int64_t m_pad = (m + kTile - 1) / kTile * kTile;
  uint16_t* xp = scratch<uint16_t, 0>(static_cast<size_t>(kParts * m_pad * args.k));
  pack_x(args.x, m, args.k, m_pad, xp);
  // k in blocks of kKc: a block of the packed x (3 x m_pad x kKc bf16, 768 KiB at m = 512)
  // stays in L2 while every column panel of the thread uses it; without the blocking the
  // whole packed x was re-read from L3 for every 32 columns. The C tiles of each (panel,
  // 32 tokens) wait in `acc` between blocks. When the whole packed x fits the L2 budget
  // (batched decode: m_pad * k <= 160 Ki), one block spans k: the C tiles never leave the
  // tile unit, and each weight row is read front to back in one sweep, not in k slices with
  // the accumulators of every panel (19 MiB for the Qwen2.5 lm_head) going to memory between
  // them.
  const bool one_block = kParts * m_pad * args.k * 2 <= (int64_t{1} << 20);
  const int64_t kc = one_block ? args.k : kKc;
  const int64_t panels = (n_end - n_begin + 2 * kTile - 1) / (2 * kTile);
  const int64_t token_blocks = (m_pad + 2 * kTile - 1) / (2 * kTile);
  float* acc =
      scratch<float, 1>(static_cast<size_t>((one_block ? 1 : panels * token_blocks) * 4 * 256));
  int configured = -1;
  for (int64_t kb = 0; kb < args.k; kb += kc) {
    const int64_t kb_end = std::min(args.k, kb + kc);
    const bool first = kb == 0, last = kb_end == args.k;
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t j0 = n_begin + p * 2 * kTile;
      const int cols0 = static_cast<int>(std::min<int64_t>(kTile, n_end - j0));
      const int cols1 = static_cast<int>(std::clamp<int64_t>(n_end - j0 - kTile, 0, kTile));
      if (cols0 * 32 + cols1 != configured) {
        configure_tiles(cols0, cols1);
        configured = cols0 * 32 + cols1;
      }
      for (int64_t tb = 0; tb < token_blocks; ++tb) {
        const int64_t i0 = tb * 2 * kTile;
        const bool b1 = i0 + kTile < m_pad;
        float* a = acc + (one_block ? 0 : (p * token_blocks + tb) * 4 * 256);
        const bool prefetch = tb == 0;  // later token blocks find the rows in L1/L2
        if (cols1 > 0) {
          b1 ? tile_block<true, true>(args, xp, m_pad, j0, cols0, cols1, i0, kb, kb_end, first,
                                      last, prefetch, a)
             : tile_block<true, false>(args, xp, m_pad, j0, cols0, cols1, i0, kb, kb_end, first,
                                       last, prefetch, a);
        } else {
          b1 ? tile_block<false, true>(args, xp, m_pad, j0, cols0, cols1, i0, kb, kb_end, first,
                                       last, prefetch, a)
             : tile_block<false, false>(args, xp, m_pad, j0, cols0, cols1, i0, kb, kb_end, first,
                                        last, prefetch, a);
        }
      }
    }
  }
  _tile_release();
}

}  // namespace qs::kernels::cpu
