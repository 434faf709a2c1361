// kernels/cuda: paged_attention.h.
//
// The attention kernel gives a block of 128 threads to one (query token, kv head, partition
// of the keys), and up to eight of the kv head's query heads: each K/V row it fetches serves
// all of them (GQA), and eight heads by 256 dims are 16 accumulators per thread. It walks the
// keys in tiles of 32, converted to f32 in shared memory, and keeps a running softmax per head
// (FlashAttention's rescaling: m the largest score so far, l the sum of exp(score - m)):
//   scores   one thread per (head, key) pair; a warp takes the 32 keys of one head, so its
//            query row is broadcast and the tile's rows, padded to head_dim + 1 floats, fall
//            in 32 different banks;
//   softmax  one warp per head, one lane per key: the tile's maximum and sum in two shuffles;
//   values   each thread owns fixed (head, dim) outputs and adds the tile's weighted V rows,
//            reading consecutive dims across a warp.
// A query's keys are a contiguous range [lo, pos], so only the last tile has masked keys.
// With a workspace, long key ranges are split into partitions of kAttentionPartitionKeys
// keys, each its own block, and a second kernel merges their (m, l, unnormalised output).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/float_codecs.cuh"
#include "kernels/cuda/paged_attention.h"

namespace qs::kernels::cuda {
namespace {

// The cache's element codecs, as ops/kv_codec.h's (float_codecs.cuh matches them bit for bit).
struct CacheF32 {
  using T = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float x) { return x; }
};
struct CacheBF16 {
  using T = uint16_t;
  __device__ static float load(uint16_t v) { return bf16_bits_to_f32(v); }
  __device__ static uint16_t store(float x) { return f32_to_bf16_bits(x); }
};
struct CacheE4M3 {
  using T = uint8_t;
  __device__ static float load(uint8_t v) { return fp8_e4m3_to_f32(v); }
  __device__ static uint8_t store(float x) { return f32_to_fp8_e4m3(x); }
};
struct CacheE5M2 {
  using T = uint8_t;
  __device__ static float load(uint8_t v) { return fp8_e5m2_to_f32(v); }
  __device__ static uint8_t store(float x) { return f32_to_fp8_e5m2_sat(x); }
};

// The sequence that batch row t belongs to: the last one starting at or before t (the
// sequences tile the batch in order; a batch has at most a few hundred).
__device__ int seq_of_token(const PagedSeq* seqs, int n_seqs, int64_t t) {
  int lo = 0, hi = n_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (seqs[mid].query_start <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The cache row of position `pos` of a sequence with block table `table`.
__device__ __forceinline__ int64_t cache_slot(const int32_t* table, int64_t block_size,
                                              int64_t pos) {
  return static_cast<int64_t>(table[pos / block_size]) * block_size + pos % block_size;
}

// One block per new token; its threads convert the token's K and V rows in order. Division,
// not a reciprocal, as ops::paged_kv_write and vLLM do.
template <class Codec>
__global__ void kv_write_kernel(typename Codec::T* kc, typename Codec::T* vc, int64_t block_size,
                                int64_t row, float k_scale, float v_scale, const PagedSeq* seqs,
                                int n_seqs, const int32_t* block_tables, const float* k,
                                const float* v) {
  const int64_t t = blockIdx.x;
  const PagedSeq s = seqs[seq_of_token(seqs, n_seqs, t)];
  const int64_t pos = s.start_pos + (t - s.query_start);
  const int64_t slot = cache_slot(block_tables + s.block_table_offset, block_size, pos);
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    kc[slot * row + i] = Codec::store(k[t * row + i] / k_scale);
    vc[slot * row + i] = Codec::store(v[t * row + i] / v_scale);
  }
}

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / kWarpSize;
constexpr int kKeysPerTile = kWarpSize;  // the softmax step gives each key a lane
constexpr int kHeadsPerBlock = 8;
constexpr int kAccPerThread = kHeadsPerBlock * kMaxAttentionHeadDim / kAttnThreads;

struct AttnParams {
  const float* q;
  float* out;
  float* partials;  // [n_tokens, n_heads, n_parts, head_dim + 2]: m, l, output (n_parts > 1)
  const void* k;
  const void* v;
  const PagedSeq* seqs;
  int n_seqs;
  const int32_t* block_tables;
  int64_t block_size, n_kv_heads, n_heads, sliding_window;
  int head_dim, group, n_head_chunks, n_parts;
  float score_scale, v_scale;
};

// Shared memory of one block, in floats: the queries, a K or V tile (rows padded by one float
// against bank conflicts) and the tile's scores.
int64_t attn_smem_floats(int64_t hd) {
  return kHeadsPerBlock * hd + kKeysPerTile * (hd + 1) + kHeadsPerBlock * kKeysPerTile;
}

// Keys k0 ... k0 + n_k - 1 of kv head `kvh` into `tile` as f32: a warp per key row, its lanes
// along the row, so each row is read in whole transactions.
template <class Codec>
__device__ void load_tile(const typename Codec::T* cache, const int32_t* table, const AttnParams& a,
                          int64_t kvh, int64_t k0, int n_k, float* tile) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int key = warp; key < n_k; key += kAttnWarps) {
    const typename Codec::T* src =
        cache + (cache_slot(table, a.block_size, k0 + key) * a.n_kv_heads + kvh) * a.head_dim;
    float* dst = tile + key * (a.head_dim + 1);
    for (int i = lane; i < a.head_dim; i += kWarpSize) dst[i] = Codec::load(src[i]);
  }
}

template <class Codec>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(AttnParams a) {
  extern __shared__ float smem[];
  __shared__ float m_s[kHeadsPerBlock], l_s[kHeadsPerBlock], corr_s[kHeadsPerBlock];
  const float neg_inf = -__int_as_float(0x7f800000);
  const int hd = a.head_dim;
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int64_t t = blockIdx.x;
  const int64_t kvh = blockIdx.y / a.n_head_chunks;
  const int chunk = static_cast<int>(blockIdx.y % a.n_head_chunks);
  const int part = static_cast<int>(blockIdx.z);
  const int n_h = min(kHeadsPerBlock, a.group - chunk * kHeadsPerBlock);
  const int64_t h0 = kvh * a.group + chunk * kHeadsPerBlock;  // this block's first query head
  const PagedSeq s = a.seqs[seq_of_token(a.seqs, a.n_seqs, t)];
  const int64_t pos = s.start_pos + (t - s.query_start);
  const int64_t lo = a.sliding_window > 0 ? max(int64_t{0}, pos - a.sliding_window + 1) : 0;
  const int64_t key_begin = lo + static_cast<int64_t>(part) * kAttentionPartitionKeys;
  const int64_t key_end =
      a.n_parts == 1 ? pos + 1 : min(pos + 1, key_begin + kAttentionPartitionKeys);
  const int n_own = n_h * hd;  // this block's outputs; thread tid owns tid + j * kAttnThreads

  if (key_begin >= key_end) {  // a partition past this token's keys: empty for the merge
    for (int h = tid; h < n_h; h += kAttnThreads) {
      float* row = a.partials + ((t * a.n_heads + h0 + h) * a.n_parts + part) * (hd + 2);
      row[0] = neg_inf;
      row[1] = 0.0f;
    }
    return;
  }

  float* q_s = smem;                                 // [n_h, hd], times scale * k_scale
  float* tile = q_s + kHeadsPerBlock * hd;           // [kKeysPerTile, hd + 1]
  float* p_s = tile + kKeysPerTile * (hd + 1);       // [n_h, kKeysPerTile]: scores, then weights
  const float* q = a.q + (t * a.n_heads + h0) * hd;  // the block's heads are adjacent in q
  for (int e = tid; e < n_own; e += kAttnThreads) q_s[e] = q[e] * a.score_scale;
  if (tid < kHeadsPerBlock) {
    m_s[tid] = neg_inf;
    l_s[tid] = 0.0f;
  }
  float acc[kAccPerThread];
#pragma unroll
  for (int j = 0; j < kAccPerThread; ++j) acc[j] = 0.0f;
  const auto* kc = static_cast<const typename Codec::T*>(a.k);
  const auto* vc = static_cast<const typename Codec::T*>(a.v);
  const int32_t* table = a.block_tables + s.block_table_offset;

  for (int64_t k0 = key_begin; k0 < key_end; k0 += kKeysPerTile) {
    const int n_k = static_cast<int>(min(int64_t{kKeysPerTile}, key_end - k0));
    load_tile<Codec>(kc, table, a, kvh, k0, n_k, tile);
    __syncthreads();
    for (int pair = tid; pair < n_h * kKeysPerTile; pair += kAttnThreads) {
      const int h = pair / kKeysPerTile, key = pair % kKeysPerTile;
      float d = neg_inf;  // a masked key weighs exp(-inf) = 0
      if (key < n_k) {
        const float* qh = q_s + h * hd;
        const float* kr = tile + key * (hd + 1);
        d = 0.0f;
        for (int i = 0; i < hd; ++i) d += qh[i] * kr[i];
      }
      p_s[pair] = d;
    }
    __syncthreads();
    for (int h = warp; h < n_h; h += kAttnWarps) {
      const float score = p_s[h * kKeysPerTile + lane];
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, warp_max(score));
      const float p = lane < n_k ? expf(score - m_new) : 0.0f;
      const float tile_sum = warp_sum(p);
      p_s[h * kKeysPerTile + lane] = p;
      if (lane == 0) {
        const float corr = expf(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        l_s[h] = l_s[h] * corr + tile_sum;
        m_s[h] = m_new;
        corr_s[h] = corr;
      }
    }
    // The V tile replaces the K tile, which no thread reads after the barrier above.
    load_tile<Codec>(vc, table, a, kvh, k0, n_k, tile);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kAccPerThread; ++j) {
      const int e = tid + j * kAttnThreads;
      if (e < n_own) {
        const int h = e / hd, i = e % hd;
        const float* ph = p_s + h * kKeysPerTile;
        float sum = acc[j] * corr_s[h];
        for (int key = 0; key < n_k; ++key) sum += ph[key] * tile[key * (hd + 1) + i];
        acc[j] = sum;
      }
    }
    __syncthreads();  // before the next tile overwrites `tile` and `p_s`
  }

#pragma unroll
  for (int j = 0; j < kAccPerThread; ++j) {
    const int e = tid + j * kAttnThreads;
    if (e < n_own) {
      const int h = e / hd, i = e % hd;
      const int64_t row = t * a.n_heads + h0 + h;
      if (a.n_parts == 1) {
        a.out[row * hd + i] = acc[j] * (a.v_scale / l_s[h]);
      } else {
        float* pr = a.partials + (row * a.n_parts + part) * (hd + 2);
        pr[2 + i] = acc[j];
        if (i == 0) {
          pr[0] = m_s[h];
          pr[1] = l_s[h];
        }
      }
    }
  }
}

// One block per (token, head): the softmax over all keys from each partition's (m, l,
// output), as ops::paged_attention merges its split tiles. An empty partition has l = 0.
__global__ void merge_partitions_kernel(const float* partials, int n_parts, int hd, float v_scale,
                                        float* out) {
  const int64_t row = blockIdx.x;
  const float* parts = partials + row * n_parts * (hd + 2);
  float mx = -__int_as_float(0x7f800000);
  for (int p = 0; p < n_parts; ++p) {
    if (parts[p * (hd + 2) + 1] > 0.0f) mx = fmaxf(mx, parts[p * (hd + 2)]);
  }
  float denom = 0.0f;
  for (int p = 0; p < n_parts; ++p) {
    const float l = parts[p * (hd + 2) + 1];
    if (l > 0.0f) denom += expf(parts[p * (hd + 2)] - mx) * l;
  }
  const float inv = v_scale / denom;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    float o = 0.0f;
    for (int p = 0; p < n_parts; ++p) {
      const float* pr = parts + p * (hd + 2);
      if (pr[1] > 0.0f) o += expf(pr[0] - mx) * pr[2 + i];
    }
    out[row * hd + i] = o * inv;
  }
}

CudaStatus unsupported_cache(const char* what, DType dtype) {
  return {static_cast<int>(cudaErrorInvalidValue),
          std::string(what) + ": no kernel for a KV cache of " + dtype_name(dtype)};
}

template <class Codec>
void launch_kv_write(const PagedKvCache& c, const PagedSeq* seqs, int32_t n_seqs,
                     const int32_t* block_tables, const float* k, const float* v, int64_t n_tokens,
                     Stream stream) {
  using T = typename Codec::T;
  kv_write_kernel<Codec><<<static_cast<unsigned>(n_tokens), 128, 0, stream>>>(
      static_cast<T*>(c.k), static_cast<T*>(c.v), c.block_size, c.n_kv_heads * c.head_dim,
      c.k_scale, c.v_scale, seqs, n_seqs, block_tables, k, v);
}

template <class Codec>
void launch_attention(const AttnParams& p, int64_t n_tokens, int64_t n_kv_heads, Stream stream) {
  const dim3 grid(static_cast<unsigned>(n_tokens),
                  static_cast<unsigned>(n_kv_heads * p.n_head_chunks),
                  static_cast<unsigned>(p.n_parts));
  const size_t smem = attn_smem_floats(p.head_dim) * sizeof(float);
  attention_kernel<Codec><<<grid, kAttnThreads, smem, stream>>>(p);
}

}  // namespace

CudaStatus paged_kv_write(const PagedKvCache& cache, const PagedSeq* seqs, int32_t n_seqs,
                          const int32_t* block_tables, const float* k, const float* v,
                          int64_t n_tokens, Stream stream) {
  if (n_tokens == 0) return {};
  switch (cache.dtype) {
    case DType::kF32:
      launch_kv_write<CacheF32>(cache, seqs, n_seqs, block_tables, k, v, n_tokens, stream);
      break;
    case DType::kBF16:
      launch_kv_write<CacheBF16>(cache, seqs, n_seqs, block_tables, k, v, n_tokens, stream);
      break;
    case DType::kF8E4M3:
      launch_kv_write<CacheE4M3>(cache, seqs, n_seqs, block_tables, k, v, n_tokens, stream);
      break;
    case DType::kF8E5M2:
      launch_kv_write<CacheE5M2>(cache, seqs, n_seqs, block_tables, k, v, n_tokens, stream);
      break;
    default:
      return unsupported_cache("paged_kv_write", cache.dtype);
  }
  return last_error();
}

int64_t paged_attention_partitions(int64_t max_seq_len, int64_t sliding_window) {
  const int64_t keys = sliding_window > 0 ? std::min(max_seq_len, sliding_window) : max_seq_len;
  return std::max<int64_t>(1, (keys + kAttentionPartitionKeys - 1) / kAttentionPartitionKeys);
}

size_t paged_attention_workspace_bytes(int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                       int64_t max_seq_len, int64_t sliding_window) {
  const int64_t parts = paged_attention_partitions(max_seq_len, sliding_window);
  if (parts == 1) return 0;
  return static_cast<size_t>(n_tokens * n_heads * parts * (head_dim + 2)) * sizeof(float);
}

CudaStatus paged_attention(const PagedAttentionArgs& args, Stream stream) {
  if (args.n_tokens == 0) return {};
  const PagedKvCache& c = args.cache;
  AttnParams p{};
  p.q = args.q;
  p.out = args.out;
  p.partials = args.workspace;
  p.k = c.k;
  p.v = c.v;
  p.seqs = args.seqs;
  p.n_seqs = args.n_seqs;
  p.block_tables = args.block_tables;
  p.block_size = c.block_size;
  p.n_kv_heads = c.n_kv_heads;
  p.n_heads = args.n_heads;
  p.sliding_window = args.sliding_window;
  p.head_dim = static_cast<int>(c.head_dim);
  p.group = static_cast<int>(args.n_heads / c.n_kv_heads);
  p.n_head_chunks = (p.group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  p.n_parts =
      args.workspace != nullptr
          ? static_cast<int>(paged_attention_partitions(args.max_seq_len, args.sliding_window))
          : 1;
  // The stored keys are k / k_scale: k_scale folds into the queries' factor, v_scale into the
  // final normalisation (for f32 and bf16 caches both are 1).
  p.score_scale = args.scale * c.k_scale;
  p.v_scale = c.v_scale;
  switch (c.dtype) {
    case DType::kF32:
      launch_attention<CacheF32>(p, args.n_tokens, c.n_kv_heads, stream);
      break;
    case DType::kBF16:
      launch_attention<CacheBF16>(p, args.n_tokens, c.n_kv_heads, stream);
      break;
    case DType::kF8E4M3:
      launch_attention<CacheE4M3>(p, args.n_tokens, c.n_kv_heads, stream);
      break;
    case DType::kF8E5M2:
      launch_attention<CacheE5M2>(p, args.n_tokens, c.n_kv_heads, stream);
      break;
    default:
      return unsupported_cache("paged_attention", c.dtype);
  }
  CudaStatus s = last_error();
  if (!s.ok() || p.n_parts == 1) return s;
  merge_partitions_kernel<<<static_cast<unsigned>(args.n_tokens * args.n_heads), 128, 0, stream>>>(
      args.workspace, p.n_parts, p.head_dim, c.v_scale, args.out);
  return last_error();
}

}  // namespace qs::kernels::cuda
