// kernels/cpu: the int GEMM's weight panel, shared by the AVX-512 VNNI GEMM
// (qlinear_avx512.cc) and the AMX one (qlinear_amx.cc): a panel of 32 columns is unpacked, a
// chunk of blocks at a time, into [block][input quad][32 columns] u8x4 words. That is the
// VNNI operand layout of vpdpbusd (4 inputs of 16 columns per zmm) and of an AMX B tile (one
// tile row = one input quad of 16 columns, 64 bytes, row stride 128 bytes).
// Include only from files compiled with the AVX-512 flags. The functions have internal
// linkage so that each including file keeps its own copy, compiled with its own flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/qmatrix.h"

namespace qs::kernels::cpu {
namespace {  // NOLINT: internal linkage on purpose, see above

constexpr int kPanelCols = 32;
constexpr int64_t kChunkBlocks = 16;  // 16 blocks x 32 columns x 32 bytes = 16 KiB of panel
constexpr int kQuads = kQBlock / 4;   // 8 groups of 4 inputs per block

// 16x16 transpose of 32-bit words held in r[0..15].
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Now r[4a + b] holds, in each 128-bit lane L, word 4L + b of rows 4a..4a+3. Gather
  // lane L of r[b], r[4 + b], r[8 + b], r[12 + b] into one register: word 4L + b of all rows.
  for (int b = 0; b < 4; ++b) {
    const __m512i a0 = _mm512_shuffle_i32x4(r[b], r[4 + b], 0x88);  // L0, L2 | L0, L2
    const __m512i a1 = _mm512_shuffle_i32x4(r[b], r[4 + b], 0xDD);  // L1, L3 | L1, L3
    const __m512i b0 = _mm512_shuffle_i32x4(r[8 + b], r[12 + b], 0x88);
    const __m512i b1 = _mm512_shuffle_i32x4(r[8 + b], r[12 + b], 0xDD);
    t[b] = _mm512_shuffle_i32x4(a0, b0, 0x88);       // lane 0 of all four
    t[4 + b] = _mm512_shuffle_i32x4(a1, b1, 0x88);   // lane 1
    t[8 + b] = _mm512_shuffle_i32x4(a0, b0, 0xDD);   // lane 2
    t[12 + b] = _mm512_shuffle_i32x4(a1, b1, 0xDD);  // lane 3
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Codes of blocks b, b+1 of one 8-bit column (64 bytes; a missing b+1, `pair` false, reads
// as zeros).
inline __m512i pair_8bit(const uint8_t* col, int64_t b, bool pair) {
  return _mm512_maskz_loadu_epi8(pair ? ~__mmask64{0} : __mmask64{0xFFFFFFFF}, col + b * kQBlock);
}

// The same bytes of the next panel (32 columns on), into L2. Batched decode reads every
// weight from DRAM once per step, and the unpack's loads, 16 columns 448 bytes apart (k = 896,
// 4-bit), are too short a stream each for the hardware prefetcher. Past the last panel the
// address is beyond the codes, which is harmless: prefetches never fault.
inline void prefetch_next_panel(const uint8_t* at, size_t col_bytes) {
  _mm_prefetch(reinterpret_cast<const char*>(at + kPanelCols * col_bytes), _MM_HINT_T1);
}

inline void store_quad(int32_t* panel, int64_t blk, int quad, int half, __m512i v) {
  _mm512_store_si512(panel + (blk * kQuads + quad) * kPanelCols + half * 16, v);
}

// 4-bit: byte 4t + i of a block holds input 4t + i in its low nibble and 16 + 4t + i in its
// high one, so each packed dword is quad t and quad t + 4 at once. Transposing the packed
// dwords of four blocks (one 64-byte load per column) and splitting the nibbles afterwards
// does half the shuffles of expanding the nibbles first: at m = 16 the unpack is the GEMM's
// largest cost, since it is paid once per call whatever the row count.
inline void unpack_4bit(const QMatrixView& w, int64_t j0, int nc, int64_t b0, int64_t nbk,
                        int32_t* panel) {
  const size_t col_bytes = w.code_bytes_per_column();
  const __m512i nib = _mm512_set1_epi8(0x0F);
  for (int half = 0; half < 2; ++half) {
    for (int64_t blk = 0; blk < nbk; blk += 4) {
      const int64_t here = std::min<int64_t>(4, nbk - blk);
      const __mmask64 mk = here == 4 ? ~__mmask64{0} : (__mmask64{1} << (here * 16)) - 1;
      __m512i r[16];
      for (int c = 0; c < 16; ++c) {
        const int col = half * 16 + c;
        const uint8_t* at =
            w.codes + static_cast<size_t>(j0 + col) * col_bytes + (b0 + blk) * (kQBlock / 2);
        prefetch_next_panel(at, col_bytes);
        r[c] = col < nc ? _mm512_maskz_loadu_epi8(mk, at) : _mm512_setzero_si512();
      }
      transpose16(r);
      // r[4 * i + t]: packed dword t of block blk + i for the 16 columns.
      for (int i = 0; i < here; ++i) {
        for (int t = 0; t < 4; ++t) {
          const __m512i v = r[4 * i + t];
          store_quad(panel, blk + i, t, half, _mm512_and_si512(v, nib));
          store_quad(panel, blk + i, t + 4, half, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
        }
      }
    }
  }
}

inline void unpack_8bit(const QMatrixView& w, int64_t j0, int nc, int64_t b0, int64_t nbk,
                        int32_t* panel) {
  const size_t col_bytes = w.code_bytes_per_column();
  for (int half = 0; half < 2; ++half) {
    for (int64_t blk = 0; blk < nbk; blk += 2) {
      const bool pair = blk + 1 < nbk;
      __m512i r[16];
      for (int c = 0; c < 16; ++c) {
        const int col = half * 16 + c;
        const uint8_t* base = w.codes + static_cast<size_t>(j0 + col) * col_bytes;
        prefetch_next_panel(base + (b0 + blk) * kQBlock, col_bytes);
        r[c] = col < nc ? pair_8bit(base, b0 + blk, pair) : _mm512_setzero_si512();
      }
      transpose16(r);
      // r[t] = input quad t of the pair for the 16 columns: quads 0..7 block blk, 8..15 blk+1.
      for (int t = 0; t < (pair ? 16 : 8); ++t)
        store_quad(panel, blk + t / kQuads, t % kQuads, half, r[t]);
    }
  }
}

// Unpacks blocks [b0, b0 + nbk) of columns [j0, j0 + nc) into panel[blk][quad][32 cols].
template <int kBits>
void unpack_panel(const QMatrixView& w, int64_t j0, int nc, int64_t b0, int64_t nbk,
                  int32_t* panel) {
  if constexpr (kBits == 4) {
    unpack_4bit(w, j0, nc, b0, nbk, panel);
  } else {
    unpack_8bit(w, j0, nc, b0, nbk, panel);
  }
}

}  // namespace
}  // namespace qs::kernels::cpu
