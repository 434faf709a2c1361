// kernels/cpu: the AMX int8 GEMM over the resident layout of kernels/qmatrix.h, for prefill and
// batched decode on CPUs with AMX (kernels::amx_active()). The weight panel is the one the
// AVX-512 VNNI GEMM unpacks (qlinear_panel_avx512.h), which is already an AMX B tile; the
// activations' int8 rows are A tiles as they lie in QActsView::q. One TDPBSSD per 32-input
// block multiplies 16 rows by 16 columns exactly in int32; the block's int32 products are
// stored, converted and scaled by the row's block scale d in f32, and the group scale (and
// zero term) is applied once per group. So results differ from ref::qlinear_int8 only by
// float summation order, like the other int kernels.
// Compiled with the AVX-512 flags plus AMX-TILE/INT8/BF16 (file suffix _amx.cc).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/cpu/qlinear_panel_avx512.h"

namespace qs::kernels::cpu {
namespace {

// Tiles: 0, 1 = A (two strips of up to 16 activation rows x 32 int8: one block), 2, 3 = B
// (the panel's two 16-column halves, 8 quads x 64 bytes), 4..7 = C (strip x half, rows x 16
// int32). Four independent products per block keep the tile unit busy; with one C tile per
// block, each product waited for the previous store (measured: no faster than VNNI).
constexpr int kTileRows = 16;
constexpr int kStripRows = 2 * kTileRows;
// Blocks whose products are stored before they are summed: 2 x 4 tiles = 8 KiB, two such
// buffers in turn (see gemm), which stay in L1 beside the 16 KiB panel.
constexpr int64_t kSubBlocks = 4;

// The first `count` of 16 lanes (none for count <= 0).
inline __mmask16 lane_mask_cols(int count) {
  if (count <= 0) return 0;
  return count >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << count) - 1);
}

// rows0, rows1: the rows of the two strips (rows1 may be 0: tiles 1, 6, 7 unused).
void configure_tiles(int rows0, int rows1) {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  const int strip_rows[2] = {rows0, rows1};
  for (int strip = 0; strip < 2; ++strip) {
    const auto rows = static_cast<uint8_t>(std::max(strip_rows[strip], 1));
    cfg.rows[strip] = rows;
    cfg.colsb[strip] = kQBlock;  // 32 int8 of one block
    for (int half = 0; half < 2; ++half) {
      cfg.rows[4 + 2 * strip + half] = rows;
      cfg.colsb[4 + 2 * strip + half] = 64;  // 16 int32
    }
  }
  for (int t : {2, 3}) {
    cfg.rows[t] = kQuads;
    cfg.colsb[t] = 64;  // 16 columns x 4 inputs
  }
  load_tile_config(cfg);
}

// The int32 products of kSubBlocks blocks: c[blk][strip][half][row][16 columns].
using Products = int32_t[kSubBlocks][2][2][kTileRows][16];

// Products of blocks [b, b + nbk) (nbk <= kSubBlocks) for rows r0.. of one or two strips.
// GCC's tile intrinsics are macros that paste their tile numbers into the assembly, so they
// take literal numbers.
template <bool kTwoStrips>
void block_products(const QActsView& a, int64_t r0, int64_t b, int64_t nbk, const int32_t* panel,
                    Products& c) {
  const auto stride = static_cast<size_t>(a.k_pad);
  const int8_t* q = a.q + r0 * a.k_pad + b * kQBlock;
  for (int64_t blk = 0; blk < nbk; ++blk) {
    const int32_t* pw = panel + blk * kQuads * kPanelCols;
    _tile_loadd(0, q + blk * kQBlock, stride);
    _tile_loadd(2, pw, kPanelCols * 4);
    _tile_loadd(3, pw + 16, kPanelCols * 4);
    _tile_zero(4);
    _tile_zero(5);
    _tile_dpbssd(4, 0, 2);
    _tile_dpbssd(5, 0, 3);
    if constexpr (kTwoStrips) {
      _tile_loadd(1, q + kTileRows * a.k_pad + blk * kQBlock, stride);
      _tile_zero(6);
      _tile_zero(7);
      _tile_dpbssd(6, 1, 2);
      _tile_dpbssd(7, 1, 3);
    }
    _tile_stored(4, &c[blk][0][0][0][0], 64);
    _tile_stored(5, &c[blk][0][1][0][0], 64);
    if constexpr (kTwoStrips) {
      _tile_stored(6, &c[blk][1][0][0][0], 64);
      _tile_stored(7, &c[blk][1][1][0][0], 64);
    }
  }
}

// y[rows of one strip, one 16-column half] (+)= the share of blocks [b0, b0 + nbk). Per row
// the block products are summed in f32 scaled by d (16 rows at once: independent FMA chains),
// then multiplied by the group's scales with the zero terms added, once per group.
// `tables`: per group of the chunk from g_first, 32 scales then 32 zero terms (with the
// signed-code offset folded in, see gemm). `dt`: the block scales of the strip's rows,
// [block of the chunk from b_chunk][32 rows], offset to this strip.
void block_sums(const QLinearArgs& args, const Products& c, const float* dt, int64_t b_chunk,
                int strip, int half, const float* tables, int64_t g_first, int64_t j0, int nc,
                int64_t b0, int64_t nbk, int64_t r0, int rows) {
  const QMatrixView& w = *args.w;
  const QActsView& a = *args.a;
  const int64_t bpg = w.group_size / kQBlock;
  const __mmask16 mk = lane_mask_cols(nc - half * 16);
  const int64_t col = j0 + half * 16;
  const int64_t b_end = b0 + nbk;
  for (int64_t b = b0; b < b_end;) {
    const int64_t g = b / bpg;
    const int64_t seg_end = std::min(b_end, (g + 1) * bpg);
    __m512 sum[kTileRows];
#pragma GCC unroll 16
    for (int r = 0; r < kTileRows; ++r) sum[r] = _mm512_setzero_ps();
    for (int64_t bb = b; bb < seg_end; ++bb) {
      const int32_t(*p)[16] = c[bb - b0][strip][half];
#pragma GCC unroll 16
      for (int r = 0; r < kTileRows; ++r) {
        sum[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(p[r])),
                                 _mm512_set1_ps(dt[(bb - b_chunk) * kStripRows + r]), sum[r]);
      }
    }
    const float* tab = tables + (g - g_first) * 2 * kPanelCols + half * 16;
    const __m512 s = _mm512_load_ps(tab);
    const __m512 zt = _mm512_load_ps(tab + kPanelCols);
    const bool group_start = b % bpg == 0;
#pragma GCC unroll 16
    for (int r = 0; r < kTileRows; ++r) {
      if (r >= rows) break;  // unrolled over the 16 rows so that sum[] stays in registers
      float* y = args.y + (r0 + r) * w.n + col;
      __m512 acc;
      if (b == 0) {
        acc =
            args.bias != nullptr ? _mm512_maskz_loadu_ps(mk, args.bias + col) : _mm512_setzero_ps();
      } else {
        acc = _mm512_maskz_loadu_ps(mk, y);
      }
      if (group_start) {
        acc = _mm512_fmadd_ps(zt, _mm512_set1_ps(a.gsum[(r0 + r) * w.n_groups + g]), acc);
      }
      _mm512_mask_storeu_ps(y, mk, _mm512_fmadd_ps(sum[r], s, acc));
    }
    b = seg_end;
  }
}

template <int kBits>
void gemm(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  const QMatrixView& w = *args.w;
  const QActsView& a = *args.a;
  const int64_t nb = w.blocks();
  const int64_t bpg = w.group_size / kQBlock;
  alignas(64) int32_t panel[kChunkBlocks * kQuads * kPanelCols];
  alignas(64) float tables[kChunkBlocks * 2 * kPanelCols];
  alignas(64) Products products[2];
  alignas(64) float dt[kChunkBlocks * kStripRows];
  std::memset(products, 0, sizeof(products));  // rows past a short strip read defined values
  // TDPBSSD multiplies signed bytes: 4-bit codes (0..15) are, 8-bit codes are stored as
  // u - 128, and the 128 comes back exactly as it would from a zero point: scale * 128 added
  // to each zero term, times gsum = sum d * qsum.
  const float offset = kBits == 8 ? 128.0f : 0.0f;
  int configured = -1;
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kPanelCols) {
    const int nc = static_cast<int>(std::min<int64_t>(kPanelCols, n_end - j0));
    for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
      const int64_t nbk = std::min(kChunkBlocks, nb - b0);
      unpack_panel<kBits>(w, j0, nc, b0, nbk, panel);
      if constexpr (kBits == 8) {
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
        for (int64_t i = 0; i < nbk * kQuads * kPanelCols; i += 16) {
          _mm512_store_si512(panel + i, _mm512_xor_si512(_mm512_load_si512(panel + i), flip));
        }
      }
      const int64_t g_first = b0 / bpg, g_last = (b0 + nbk - 1) / bpg;
      for (int64_t g = g_first; g <= g_last; ++g) {
        float* tab = tables + (g - g_first) * 2 * kPanelCols;
        for (int c = 0; c < kPanelCols; ++c) {
          const size_t at = static_cast<size_t>((j0 + c) * w.n_groups + g);
          const float s = c < nc ? w.scales[at] : 0.0f;
          tab[c] = s;
          const float zt =
              c >= nc ? 0.0f : (w.zero_terms != nullptr ? w.zero_terms[at] : -s * w.uniform_zero);
          tab[kPanelCols + c] = zt + s * offset;
        }
      }
      for (int64_t r0 = 0; r0 < a.m; r0 += kStripRows) {
        const int rows0 = static_cast<int>(std::min<int64_t>(kTileRows, a.m - r0));
        const int rows1 = static_cast<int>(std::clamp<int64_t>(a.m - r0 - kTileRows, 0, kTileRows));
        if (rows0 * 32 + rows1 != configured) {
          configure_tiles(rows0, rows1);
          configured = rows0 * 32 + rows1;
        }
        // Products go to two buffers in turn and each is summed after the next one's tile
        // products are issued: vector loads of freshly stored tile rows wait for the stores
        // to complete, which otherwise serializes the tile unit and the FMA units.
        int64_t pending = -1;  // first block of the products not yet summed
        // The strip's block scales, transposed so that a block's 16 rows are one pointer
        // away; rows past the last repeat it (their sums are computed, never stored).
        for (int64_t blk = 0; blk < nbk; ++blk) {
          for (int r = 0; r < kStripRows; ++r) {
            const int64_t row = std::min<int64_t>(r0 + r, a.m - 1);
            dt[blk * kStripRows + r] = a.d[row * nb + b0 + blk];
          }
        }
        const int64_t steps = (nbk + kSubBlocks - 1) / kSubBlocks;
        for (int64_t step = 0; step <= steps; ++step) {
          const int64_t sb = step * kSubBlocks;
          if (sb < nbk) {
            const int64_t nsb = std::min(kSubBlocks, nbk - sb);
            const int32_t* pw = panel + sb * kQuads * kPanelCols;
            Products& buf = products[(sb / kSubBlocks) % 2];
            if (rows1 > 0) {
              block_products<true>(a, r0, b0 + sb, nsb, pw, buf);
            } else {
              block_products<false>(a, r0, b0 + sb, nsb, pw, buf);
            }
          }
          if (pending >= 0) {
            const int64_t nsb = std::min(kSubBlocks, nbk - pending);
            const Products& buf = products[(pending / kSubBlocks) % 2];
            for (int strip = 0; strip < (rows1 > 0 ? 2 : 1); ++strip) {
              for (int half = 0; half < 2 && half * 16 < nc; ++half) {
                block_sums(args, buf, dt + strip * kTileRows, b0, strip, half, tables, g_first, j0,
                           nc, b0 + pending, nsb, r0 + strip * kTileRows,
                           strip == 0 ? rows0 : rows1);
              }
            }
          }
          pending = sb < nbk ? sb : -1;
        }
      }
    }
  }
  if (configured >= 0) _tile_release();
}

}  // namespace

void qlinear_gemm_amx(const QLinearArgs& args, int64_t n_begin, int64_t n_end) {
  if (args.w->bits == 4) {
    gemm<4>(args, n_begin, n_end);
  } else {
    QS_CHECK(args.w->bits == 8);
    gemm<8>(args, n_begin, n_end);
  }
}

}  // namespace qs::kernels::cpu
