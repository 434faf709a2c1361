// kernels/cuda: the W4A16 tensor-core GEMM (w4a16_gemm.h describes the tiling, w4a16_layout.h
// the weights it reads). Three kernels: the optional copy of x (act-order permutation, padding
// of k), the GEMM, and the split-K reduction.
#include "kernels/cuda/w4a16_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>

#include "core/check.h"

namespace qs::kernels::cuda {
namespace {

constexpr int kThreads = 128;      // 4 warps, one strip of 16 outputs each
constexpr int kStages = 4;         // cp.async ring depth
constexpr int kBN = 64;            // outputs per block (kW4PadN)
constexpr int kBK = 64;            // inputs per stage (kW4PadK)
constexpr int kAStride = kBK + 8;  // bf16 per shared row of x: 36 words, so rows g = 0..7 of a
                                   // fragment load fall on banks 4g + t, all distinct
static_assert(kBN == kW4PadN && kBK == kW4PadK, "the layout pads to the GEMM's tiles");

struct Params {
  const uint16_t* x;  // [m, x_ld] bf16 bits; x_ld >= k_pad
  int64_t x_ld;
  int m;
  const uint32_t* qweight;
  const void* scales;
  W4ScaleType scale_type;
  const uint8_t* zeros;  // or null: uniform_zero
  uint32_t uniform_zero;
  int n, n_pad;
  int k_tiles;  // k_pad / 16
  int group_size;
  int k_stages;          // k_pad / 64
  int stages_per_split;  // of the last split possibly fewer
  float* partial;        // splits > 1: [splits, m, n]; else null and y is written
  void* y;
  bool y_bf16;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // src-size 0 reads nothing and zero-fills the 16 bytes (rows of x past m).
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// d = a (16 x 16, row) * b (16 x 8, col) + d; bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (128 + code) - (128 + zero) on two bf16 lanes: exact, the result is a small integer.
__device__ __forceinline__ uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
  __nv_bfloat162 va, vb;
  memcpy(&va, &a, 4);
  memcpy(&vb, &b, 4);
  const __nv_bfloat162 r = __hsub2(va, vb);
  uint32_t out;
  memcpy(&out, &r, 4);
  return out;
}

__device__ __forceinline__ float load_scale(const void* s, W4ScaleType t, int64_t i) {
  if (t == W4ScaleType::kF32) return __ldg(static_cast<const float*>(s) + i);
  const unsigned short bits = __ldg(static_cast<const unsigned short*>(s) + i);
  if (t == W4ScaleType::kF16) return __half2float(__ushort_as_half(bits));
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

template <int MI>
__global__ void __launch_bounds__(kThreads) w4a16_kernel(Params p) {
  constexpr int kBM = 16 * MI;
  __shared__ __align__(16) uint16_t s_x[kStages][kBM][kAStride];
  __shared__ __align__(16) uint32_t s_w[kStages][4][4 * 32];  // [strip][tile * 32 + lane]

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // the fragment's row/column group and its pair
  const int m0 = static_cast<int>(blockIdx.y) * kBM;
  const int strip0 = static_cast<int>(blockIdx.x) * 4;
  const int split = static_cast<int>(blockIdx.z);
  const int st_begin = split * p.stages_per_split;
  const int n_st = min(p.k_stages, st_begin + p.stages_per_split) - st_begin;

  auto load_stage = [&](int slot, int st) {
    // x: kBM rows of 64 inputs, 8 chunks of 16 bytes per row.
    for (int c = tid; c < kBM * 8; c += kThreads) {
      const int row = c / 8, col = (c % 8) * 8;
      const bool valid = m0 + row < p.m;
      const uint16_t* src =
          p.x + static_cast<int64_t>(valid ? m0 + row : 0) * p.x_ld + st * kBK + col;
      cp_async16(&s_x[slot][row][col], src, valid);
    }
    // Weights: 4 strips x 4 tiles x 128 bytes; a strip's 4 tiles are 512 contiguous bytes.
    const int strip = tid / 32, chunk = tid % 32;
    const uint32_t* src =
        p.qweight + (static_cast<int64_t>(strip0 + strip) * p.k_tiles + st * 4) * 32 + chunk * 4;
    cp_async16(&s_w[slot][strip][chunk * 4], src, true);
  };

  float acc[MI][2][4];   // the output tile: [m16 tile][n8 half][c0..c3]
  float part[MI][2][4];  // the current group's unscaled products
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mi][h][r] = part[mi][h][r] = 0.0f;
    }
  }

  // Columns of this lane: C holds outputs 8h + 2t + e; B holds output 8h + g.
  const int col0 = (strip0 + warp) * 16;
  int cur_group = -1;
  float scale[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // [h][e]
  uint32_t zero_bits[2] = {0, 0};                    // [h]

  auto flush = [&]() {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          acc[mi][h][r] += scale[h][r % 2] * part[mi][h][r];
          part[mi][h][r] = 0.0f;
        }
      }
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_st) load_stage(s, st_begin + s);
    cp_async_commit();
  }

  for (int i = 0; i < n_st; ++i) {
    // Stage i has landed (for this thread; the barrier makes every thread's copies visible),
    // and every warp is done with the slot the prefetch below overwrites (read at i - 1).
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (i + kStages - 1 < n_st) load_stage((i + kStages - 1) % kStages, st_begin + i + kStages - 1);
    cp_async_commit();  // an empty group near the end keeps the wait count right

    const int slot = i % kStages;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int k16 = (st_begin + i) * 4 + kk;
      // Groups are multiples of 16 inputs, so a 16-input step lies in one group; the branch is
      // uniform over the block.
      const int group = k16 * 16 / p.group_size;
      if (group != cur_group) {
        if (cur_group >= 0) flush();
        cur_group = group;
        const int64_t row = static_cast<int64_t>(group) * p.n_pad + col0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          scale[h][0] = load_scale(p.scales, p.scale_type, row + 8 * h + 2 * t);
          scale[h][1] = load_scale(p.scales, p.scale_type, row + 8 * h + 2 * t + 1);
          const uint32_t z = p.zeros != nullptr ? __ldg(p.zeros + row + 8 * h + g) : p.uniform_zero;
          zero_bits[h] = w4_zero_bits(z);
        }
      }
      const uint32_t word = s_w[slot][warp][kk * 32 + lane];
      uint32_t b[4];
#pragma unroll
      for (int s = 0; s < 4; ++s) b[s] = bf16x2_sub(w4_pair_bits(word, s), zero_bits[s / 2]);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        // A fragment (PTX m16n8k16, 16-bit A): a0 (row g, inputs 2t, 2t+1), a1 (row g + 8),
        // a2 (row g, inputs 2t + 8, 2t + 9), a3 (row g + 8, inputs 2t + 8, 2t + 9).
        const uint16_t* at = &s_x[slot][mi * 16 + g][kk * 16 + 2 * t];
        uint32_t a[4];
        a[0] = *reinterpret_cast<const uint32_t*>(at);
        a[1] = *reinterpret_cast<const uint32_t*>(at + 8 * kAStride);
        a[2] = *reinterpret_cast<const uint32_t*>(at + 8);
        a[3] = *reinterpret_cast<const uint32_t*>(at + 8 * kAStride + 8);
        mma_bf16(part[mi][0], a, b[0], b[1]);
        mma_bf16(part[mi][1], a, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
  flush();

  // C fragment: c0, c1 (row g, outputs 2t, 2t + 1), c2, c3 (row g + 8, same outputs).
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = m0 + mi * 16 + g + 8 * (r / 2);
        const int col = col0 + 8 * h + 2 * t + r % 2;
        if (row >= p.m || col >= p.n) continue;
        const int64_t at = static_cast<int64_t>(row) * p.n + col;
        const float v = acc[mi][h][r];
        if (p.partial != nullptr) {
          p.partial[static_cast<int64_t>(split) * p.m * p.n + at] = v;
        } else if (p.y_bf16) {
          static_cast<__nv_bfloat16*>(p.y)[at] = __float2bfloat16_rn(v);
        } else {
          static_cast<float*>(p.y)[at] = v;
        }
      }
    }
  }
}

// out[r, c] = x[r, perm[c]] (or x[r, c]) for c < k, 0 up to k_pad.
__global__ void stage_x_kernel(const uint16_t* x, int64_t m, int64_t k, int64_t k_pad,
                               const int32_t* perm, uint16_t* out) {
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < k_pad;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      out[r * k_pad + c] = c < k ? x[r * k + (perm != nullptr ? perm[c] : c)] : uint16_t{0};
    }
  }
}

// y = the sum of the splits' partials, in split order.
__global__ void reduce_splits_kernel(const float* partial, int splits, int64_t count, void* y,
                                     bool y_bf16) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int sp = 0; sp < splits; ++sp) s += partial[sp * count + i];
    if (y_bf16) {
      static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(s);
    } else {
      static_cast<float*>(y)[i] = s;
    }
  }
}

}  // namespace

CudaStatus w4a16_gemm(const W4A16GemmArgs& a, Stream stream) {
  const W4A16View& w = a.w;
  QS_CHECK(a.splits >= 1 && a.splits <= kW4MaxSplits);
  QS_CHECK(a.workspace_bytes >= w4a16_workspace_bytes(w, a.m, a.splits));
  QS_CHECK(w.group_size % 16 == 0 && w.k_pad % kBK == 0 && w.n_pad % kBN == 0);
  if (a.m == 0 || w.n == 0) return CudaStatus{};
  auto* ws = static_cast<uint8_t*>(a.workspace);

  Params p{};
  p.x = a.x;
  p.x_ld = w.k;
  if (w4a16_stages_x(w)) {
    auto* staged = reinterpret_cast<uint16_t*>(ws);
    ws += (static_cast<size_t>(a.m * w.k_pad) * 2 + kW4Align - 1) / kW4Align * kW4Align;
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((w.k_pad + 255) / 256, 64)),
                    static_cast<unsigned>(std::min<int64_t>(a.m, 65535)));
    stage_x_kernel<<<grid, 256, 0, stream>>>(a.x, a.m, w.k, w.k_pad, w.perm, staged);
    p.x = staged;
    p.x_ld = w.k_pad;
  } else {
    QS_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0);
  }
  p.m = static_cast<int>(a.m);
  p.qweight = w.qweight;
  p.scales = w.scales;
  p.scale_type = w.scale_type;
  p.zeros = w.zeros;
  p.uniform_zero = static_cast<uint32_t>(w.uniform_zero);
  p.n = static_cast<int>(w.n);
  p.n_pad = static_cast<int>(w.n_pad);
  p.k_tiles = static_cast<int>(w.k_pad / kW4Tile);
  p.group_size = static_cast<int>(w.group_size);
  p.k_stages = static_cast<int>(w.k_pad / kBK);
  p.stages_per_split = (p.k_stages + a.splits - 1) / a.splits;
  const int splits = (p.k_stages + p.stages_per_split - 1) / p.stages_per_split;
  p.partial = splits > 1 ? reinterpret_cast<float*>(ws) : nullptr;
  p.y = a.y;
  p.y_bf16 = a.y_bf16;

  const int mi = w4a16_m_tiles(a.m);
  const dim3 grid(static_cast<unsigned>(w.n_pad / kBN),
                  static_cast<unsigned>((a.m + 16 * mi - 1) / (16 * mi)),
                  static_cast<unsigned>(splits));
  if (mi == 1) {
    w4a16_kernel<1><<<grid, kThreads, 0, stream>>>(p);
  } else if (mi == 2) {
    w4a16_kernel<2><<<grid, kThreads, 0, stream>>>(p);
  } else {
    w4a16_kernel<4><<<grid, kThreads, 0, stream>>>(p);
  }
  if (splits > 1) {
    const int64_t count = a.m * w.n;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 4096));
    reduce_splits_kernel<<<blocks, 256, 0, stream>>>(p.partial, splits, count, a.y, a.y_bf16);
  }
  return last_error();
}

}  // namespace qs::kernels::cuda
