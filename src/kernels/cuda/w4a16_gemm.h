// kernels/cuda: the W4A16 GEMM, y[m, n] = x[m, k] @ W^T with x in bf16 and W in the packed
// layout of w4a16_layout.h (<= 4-bit codes, group scales and zeros), on the tensor cores
// (mma.sync m16n8k16 bf16, f32 accumulate; sm_80 and later). Plain C++ header: the launcher is
// compiled by nvcc (w4a16_gemm.cu), callers need neither nvcc nor CUDA's headers.
//
// Tiling: a block of 128 threads (4 warps) owns 64 outputs (4 strips of 16, one per warp) and
// 16 * mi rows of x (mi = 1, 2 or 4 m16 tiles, by m: w4a16_m_tiles); it walks its share of k
// in stages of 64 inputs, fetched with cp.async into a 4-deep ring of shared-memory buffers
// (x rows padded to 72 bf16 so that the fragment loads hit 32 distinct banks; the weight tiles
// as stored, 512 contiguous bytes per strip). Per 16 inputs each warp loads one 32-bit word per
// lane, turns it into the B fragments of its two n8 halves in registers (w4a16_layout.h), and
// issues 2 * mi mma. Products accumulate per group unscaled; at each group's end the f32 scale
// multiplies them into the output accumulator.
// Split-K (decode, where m is small and the blocks over n alone do not fill the GPU): grid.z
// cuts k into `splits` ranges of whole stages; each writes its partial [m, n] f32 into the
// workspace and a second kernel sums them in split order (deterministic, no atomics).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/w4a16_layout.h"

namespace qs::kernels::cuda {

constexpr int kW4MaxSplits = 16;

// m16 tiles per block for m rows: one for decode (m <= 16), up to four for prefill.
inline int w4a16_m_tiles(int64_t m) {
  return m <= 16 ? 1 : (m <= 32 ? 2 : 4);
}

// Split-K factor: enough blocks for two per SM, at least 4 stages (256 inputs) per split so
// that the pipeline fills, at most kW4MaxSplits, and no empty split.
inline int w4a16_choose_splits(const W4A16View& w, int64_t m, int n_sms) {
  const int64_t rows = 16 * w4a16_m_tiles(m);
  const int64_t blocks = (w.n_pad / kW4PadN) * ((m + rows - 1) / rows);
  const int64_t stages = w.k_pad / kW4PadK;
  int64_t splits = (2 * static_cast<int64_t>(std::max(n_sms, 1)) + blocks - 1) / blocks;
  splits = std::clamp<int64_t>(std::min<int64_t>(splits, stages / 4), 1, kW4MaxSplits);
  const int64_t per_split = (stages + splits - 1) / splits;
  return static_cast<int>((stages + per_split - 1) / per_split);
}

// Whether x must be copied before the GEMM reads it: act-order (x's columns permuted by
// w.perm) or k not a whole number of stages (the copy pads rows to k_pad with zeros).
inline bool w4a16_stages_x(const W4A16View& w) {
  return w.perm != nullptr || w.k != w.k_pad;
}

// Device workspace a call with `splits` needs: the copied x (m x k_pad bf16) when
// w4a16_stages_x, and splits x m x n f32 partial sums when splits > 1; each part 256-aligned.
inline size_t w4a16_workspace_bytes(const W4A16View& w, int64_t m, int splits) {
  auto up = [](size_t b) { return (b + kW4Align - 1) / kW4Align * kW4Align; };
  size_t bytes = 0;
  if (w4a16_stages_x(w)) bytes += up(static_cast<size_t>(m * w.k_pad) * 2);
  if (splits > 1) bytes += up(static_cast<size_t>(splits) * static_cast<size_t>(m * w.n) * 4);
  return bytes;
}

struct W4A16GemmArgs {
  W4A16View w;                  // the packed weight, device pointers (w4a16_view of its copy)
  const uint16_t* x = nullptr;  // [m, k] bf16 bits, row-major, 16-byte aligned (device)
  int64_t m = 0;
  void* y = nullptr;  // [m, n] row-major (device): f32, or bf16 when y_bf16
  bool y_bf16 = false;
  int splits = 1;             // split-K factor, 1 .. kW4MaxSplits (w4a16_choose_splits)
  void* workspace = nullptr;  // w4a16_workspace_bytes(w, m, splits) bytes (device)
  size_t workspace_bytes = 0;
};

// Enqueues the GEMM on `stream`; returns the launch's error (a fault shows at the next sync).
CudaStatus w4a16_gemm(const W4A16GemmArgs& args, Stream stream);

}  // namespace qs::kernels::cuda
