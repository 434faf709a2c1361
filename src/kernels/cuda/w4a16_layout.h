// kernels/cuda: the resident layout of a weight of integer codes of at most 4 bits (GPTQ,
// AutoRound, AWQ; 2- and 3-bit codes ride in 4) for the W4A16 tensor-core GEMM
// (w4a16_gemm.h). Host code, compiled with or without CUDA: the load-time pack, and the
// host reference that reads the packed buffers back, which is also the layout's definition.
// The QS_HOST_DEVICE helpers are the parts the kernel shares with that reference.
//
// The GEMM computes y[m, n] = x[m, k] @ W^T with mma.sync.aligned.m16n8k16 (bf16 in, f32
// accumulate), x as operand A and W^T as operand B. PTX fixes which elements of B each lane
// holds (PTX ISA, "Matrix fragments for mma.m16n8k16", floating point): with g = lane / 4 and
// t = lane % 4, register b_r (r = 0, 1) of an n8 x k16 tile holds the bf16 pair
// (k = 8r + 2t, 8r + 2t + 1; n = g), the first element in the low half.
//
// Codes, W16 tiles: the packed matrix (n_pad x k_pad, see W4A16Layout) is cut into tiles of
// 16 outputs x 16 inputs, 128 bytes each: 32 words, one per lane, so that a warp's single
// coalesced 32-bit load per lane holds the B fragments of both n8 halves of the tile. Word
// `lane` holds, in nibble p = s + 4e (bits 4p .. 4p + 3), the code of
//   output  16 * strip + 8h + g,          with h = s / 2 (which n8 half)
//   input   16 * ktile + 8r + 2t + e,     with r = s % 2 (which b register), e in {0, 1},
// so that (word >> 4s) & 0x000F000F puts the pair of b register r of half h into the two
// 16-bit halves (element e = 0 low, e = 1 high). Tiles are stored strip-major:
// word (strip * k_pad / 16 + ktile) * 32 + lane, so one strip of 16 outputs is contiguous
// over all of k (a pipeline stage of 64 inputs is 512 contiguous bytes per strip).
//
// Dequantization in registers (the Marlin paper's trick, Frantar et al. 2024, §3.2, here for
// bf16): OR-ing the exponent bits 0x4300 (bf16 128.0, 7 mantissa bits) onto a code u < 16
// gives the bf16 value 128 + u exactly; subtracting the bf16 128 + zero (zero in [0, 16],
// also exact) leaves u - zero exactly, one lop3 and one bf16x2 subtract per pair. The scale
// is not applied to the weights: each group's products accumulate in f32 unscaled, and the
// f32 group scale multiplies the accumulator at the group's end, so the effective weight is
// exactly scale * (u - zero), the value formats::dequantize gives, whatever the scale's
// precision (no bf16 rounding of scaled weights).
//
// Scales [n_groups, n_pad] (group-major, so a tile's 16 outputs read contiguous scales),
// stored as f32, f16 or bf16 (W4ScaleType; the checkpoint's own type keeps them exact). Zeros
// [n_groups, n_pad] u8, or none when every zero is `uniform_zero` (symmetric checkpoints).
// Act-order: packed input c is input perm[c] of x; the caller sorts inputs by group, so that
// packed input c belongs to group c / group_size (as kernels/qmatrix.h's perm).
//
// Constraints the caller (ops) meets; nothing here checks them: codes < 16; zeros in
// [0, 16]; group_size a multiple of 16, or <= 0 for one group per output (per channel);
// with a perm, every group but the last holds exactly group_size inputs. n and k are free:
// n is padded to n_pad (a multiple of 64, the GEMM's block width) with zero scales, k to
// k_pad (a multiple of 64, one pipeline stage) with zero codes; padded inputs meet x = 0.
#pragma once

#include <cstddef>
#include <cstdint>

// As float_codecs.cuh defines it (an identical redefinition is allowed).
#ifndef QS_HOST_DEVICE
#if defined(__CUDACC__)
#define QS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define QS_HOST_DEVICE inline
#endif
#endif

namespace qs::kernels::cuda {

constexpr int64_t kW4Tile = 16;       // outputs and inputs of one W16 tile
constexpr int64_t kW4TileWords = 32;  // one 32-bit word per lane
constexpr int64_t kW4PadN = 64;       // n_pad multiple: the GEMM's block of outputs
constexpr int64_t kW4PadK = 64;       // k_pad multiple: one pipeline stage of inputs
constexpr size_t kW4Align = 256;      // every section starts on 256 bytes (cudaMalloc's)

// bf16 128.0 in both halves of a word: OR-ed onto two codes it gives bf16 128 + code.
constexpr uint32_t kW4Magic = 0x43004300u;
constexpr uint32_t kW4PairMask = 0x000F000Fu;

// The two codes of pair s (0..3) of a packed word, as bf16 128 + code in each half.
QS_HOST_DEVICE uint32_t w4_pair_bits(uint32_t word, int s) {
  return ((word >> (4 * s)) & kW4PairMask) | kW4Magic;
}
// bf16 128 + zero in both halves: subtracted from w4_pair_bits, it leaves code - zero.
QS_HOST_DEVICE uint32_t w4_zero_bits(uint32_t zero) {
  return kW4Magic | zero | (zero << 16);
}

enum class W4ScaleType : uint8_t { kF32, kF16, kBF16 };
size_t w4_scale_bytes(W4ScaleType t);

// The logical weight to pack, as plain arrays (ops translates a formats::QuantizedWeight).
struct W4A16Source {
  int64_t n = 0, k = 0;
  int64_t group_size = 0;          // > 0: inputs per group (multiple of 16); <= 0: per channel
  const uint8_t* codes = nullptr;  // [n, k] one code per byte, in x's column order
  const float* scales = nullptr;   // [n, ceil(k / group_size)] ([n, 1] per channel)
  const int32_t* zeros = nullptr;  // same shape, or nullptr: every zero is uniform_zero
  int32_t uniform_zero = 8;
  const int32_t* perm = nullptr;  // [k] or nullptr (identity)
  W4ScaleType scale_type = W4ScaleType::kF32;
};

// Sizes and byte offsets of the packed sections in one buffer of total_bytes.
struct W4A16Layout {
  int64_t n = 0, k = 0, n_pad = 0, k_pad = 0;
  int64_t group_size = 0;  // of the packed matrix: k_pad when per channel
  int64_t n_groups = 0;    // ceil(k_pad / group_size): rows of scales (and zeros)
  W4ScaleType scale_type = W4ScaleType::kF32;
  bool has_zeros = false, has_perm = false;
  int32_t uniform_zero = 8;
  size_t qweight_offset = 0, scales_offset = 0, zeros_offset = 0, perm_offset = 0;
  size_t total_bytes = 0;
};

// The packed weight as the GEMM reads it; the pointers are into host or device memory.
struct W4A16View {
  int64_t n = 0, k = 0, n_pad = 0, k_pad = 0, group_size = 0, n_groups = 0;
  const uint32_t* qweight = nullptr;  // [n_pad / 16, k_pad / 16, 32] W16 tiles
  const void* scales = nullptr;       // [n_groups, n_pad] of scale_type
  W4ScaleType scale_type = W4ScaleType::kF32;
  const uint8_t* zeros = nullptr;  // [n_groups, n_pad] or nullptr
  int32_t uniform_zero = 8;
  const int32_t* perm = nullptr;  // [k] or nullptr
};

W4A16Layout w4a16_layout(const W4A16Source& src);
// The view of a packed buffer at `base` (host, or its copy on the device).
W4A16View w4a16_view(const W4A16Layout& layout, const void* base);
// Packs `src` into `buf` (w4a16_layout(src).total_bytes, 256-byte aligned) and returns the
// host view of it. Every byte of the buffer is written (padding is zero).
W4A16View w4a16_pack(const W4A16Source& src, void* buf);

// The packed weight read back the way the GEMM's warps read it (tile by tile, lane by lane,
// with the PTX fragment map and the bf16 magic-number subtraction): out[n, k] f32 in x's
// original column order, = scale * (code - zero). The reference for the layout's tests.
void w4a16_dequantize_packed(const W4A16View& w, float* out);

}  // namespace qs::kernels::cuda
