// kernels: the resident layout of a quantized linear weight, shared by the scalar reference
// (ref/qlinear_ref.h) and the SIMD kernels (cpu/qlinear_cpu.h), and of the int8 activations
// they multiply it with. The weights are repacked into it once at load (qmatrix_pack); every
// call quantizes its activations once (quantize_acts) and then streams the weights.
//
// Weights, W[n, k] = scale[j, g] * (u[j, c] - zero[j, g]) with unsigned codes u:
//   k_pad = k rounded up to 32; blocks of 32 inputs; groups of `group_size` inputs, a
//   multiple of 32 (the last group may be partial; padding codes are 0 and meet zero
//   activations). Codes of output column j are contiguous, block after block:
//     bits 4: 16 bytes per block; byte i holds input 32b+i in its low nibble and
//             32b+16+i in its high nibble (llama.cpp's Q4_0 order: one AND and one shift
//             give inputs 0..15 and 16..31);
//     bits 8: 32 bytes per block, one code per byte; with `fp8` the bytes are e4m3fn codes
//             (value = scale * e4m3(code), no zero), which only the bf16-activation kernels
//             run (ref/qlinear_bf16act_ref.h).
//   Any stored width up to 4 bits runs as bits 4 (2- and 3-bit codes fit a nibble); 5..8 as 8.
//   scales [n, G] f32; zero_terms [n, G] f32 = -scale * zero, or nullptr when every zero is
//   `uniform_zero` (symmetric checkpoints), which saves their bandwidth.
//   perm [k] (act-order checkpoints): input c of the repacked matrix is input perm[c] of x,
//   chosen so that groups are contiguous; nullptr = identity.
// Activations, per row r of x: 32-wide blocks quantized to int8 with a per-block scale
//   d = max|x| / 127 (x ~ d * q), plus per group the sum over its inputs of d * q, which the
//   zero terms multiply: y[r, j] = sum_g scale[j,g] * sum_{b in g} d[r,b] * (u . q)[b]
//                                + zero_term[j, g] * gsum[r, g].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qs::kernels {

constexpr int64_t kQBlock = 32;

// Every buffer of the packed weights and of the activations starts on a 64-byte line.
constexpr size_t kQAlign = 64;
inline size_t qalign_up(size_t bytes) {
  return (bytes + kQAlign - 1) / kQAlign * kQAlign;
}

// How a call's activations are quantized when a checkpoint declares it (W8A8): ops translates
// the checkpoint's scheme (formats::ActScheme) into this, so kernels read no formats type.
struct ActQuant {
  enum Type : uint8_t { kInt8, kFp8 };
  enum Strategy : uint8_t {
    kToken,   // one scale per row of x
    kTensor,  // one scale for the whole call (static: the checkpoint's input_scale)
    kGroup,   // one scale per row and `group_size` inputs
  };
  Type type = kInt8;
  Strategy strategy = kToken;
  bool dynamic = true;     // scales from x; false: the checkpoint's static scale (and zero)
  bool sym = true;         // false: an int8 zero point
  int64_t group_size = 0;  // kGroup only
};

struct QMatrixView {
  int bits = 4;      // 4 or 8: the resident code width
  bool fp8 = false;  // codes are e4m3fn bytes (bits 8)
  // fp8 only: every two blocks (64 codes) from the start are stored in the order the AVX-512
  // decoder's byte unpacks emit them (fp8_stored_index); a last odd block stays in input
  // order. Set when no group boundary splits a pair.
  bool fp8_pairs = false;
  int64_t n = 0, k = 0, k_pad = 0;
  int64_t group_size = 0;  // multiple of kQBlock
  int64_t n_groups = 0;    // ceil(k / group_size)
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;      // [n, n_groups]
  const float* zero_terms = nullptr;  // [n, n_groups] or nullptr
  float uniform_zero = 0;             // the zero of every group when zero_terms is null
  const int32_t* perm = nullptr;      // [k] or nullptr

  int64_t blocks() const { return k_pad / kQBlock; }
  size_t code_bytes_per_column() const {
    return static_cast<size_t>(blocks()) * kQBlock * bits / 8;
  }
};

// Where input c of a column's codes is stored when `pairs` (QMatrixView::fp8_pairs): within
// each 64-code pair of blocks, inputs 8L + o (o < 8) sit at byte 16L + o and inputs
// 32 + 8L + o at 16L + 8 + o, so that unpacking the low and high 8 bytes of each 16-byte
// lane gives inputs 0..31 and 32..63 in order. `blocks` is the column's block count.
inline int64_t fp8_stored_index(int64_t c, int64_t blocks, bool pairs) {
  if (!pairs || c >= blocks / 2 * 64) return c;
  const int64_t base = c / 64 * 64, i = c % 64;
  const int64_t half = i / 32, j = i % 32;
  return base + (j / 8) * 16 + half * 8 + j % 8;
}

// Int8 activations of one call, laid out by quantize_acts.
struct QActsView {
  int64_t m = 0, k_pad = 0, n_groups = 0, group_size = 0;
  const int8_t* q = nullptr;    // [m, k_pad], inputs permuted by the weight's perm
  const float* d = nullptr;     // [m, k_pad / 32] block scales
  const float* gsum = nullptr;  // [m, n_groups]
  // Integer sums of q per block, [m, k_pad / 32]; lets kernels that pair u8 with s8 (VNNI,
  // maddubs) or offset their codes fold the offset out exactly.
  const int32_t* qsum = nullptr;
};

// Bytes of the buffers quantize_acts fills for m rows against `w`: q, d, gsum, qsum (each
// rounded up to 64 bytes). The caller owns and aligns the buffer (64 bytes).
size_t qacts_bytes(const QMatrixView& w, int64_t m);
// The buffers of qacts_bytes(w, m) bytes at `buf` as quantize_acts lays them out: the view,
// and the same memory writable, for the per-ISA quantizers.
struct QActsBuffers {
  QActsView view;
  int8_t* q = nullptr;
  float* d = nullptr;
  float* gsum = nullptr;
  int32_t* qsum = nullptr;
};
QActsBuffers qacts_buffers(const QMatrixView& w, int64_t m, void* buf);
// Fills gsum from d and qsum, which the quantizer wrote: one definition for every ISA, so
// that the sums round alike (a file built with -mfma would contract d * qsum + s).
void qacts_group_sums(const QMatrixView& w, const QActsBuffers& bufs);
// Quantizes x [m, k] f32 for `w` into `buf` (qacts_bytes(w, m) bytes) and returns the view.
// Scalar; the per-ISA versions in cpu/qlinear_cpu.h give bit-identical q, d, gsum, qsum.
QActsView quantize_acts(const QMatrixView& w, const float* x, int64_t m, void* buf);

// W8A8 int8 activations as a checkpoint declares them (ActQuant, int8 symmetric),
// in the same layout: every block of one activation scale shares its d, per token one d =
// amax(row) / 127 for the row, static the checkpoint's `static_scale` for the call, per
// group one d per act.group_size inputs (a multiple of 32); q = round-half-even(x / d)
// clamped to [-128, 127] as vLLM's kernels do (a dynamic d never reaches -128; a static one
// calibrated as compressed-tensors does, amax / 127.5, often does). Every int kernel takes
// -128: VNNI and AMX sum u8 x s8 in i32, AVX2 widens 8-bit codes to i16 first. Scalar: one
// pass over x per call.
QActsView quantize_acts_declared(const QMatrixView& w, const ActQuant& act, float static_scale,
                                 const float* x, int64_t m, void* buf);

}  // namespace qs::kernels
