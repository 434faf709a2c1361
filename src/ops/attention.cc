// ops: paged attention, reference and fast versions (see attention.h).
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <type_traits>

#include "core/check.h"
#include "kernels/cpu/attention_dots_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_fp8_cpu.h"
#include "ops/elementwise.h"
#include "ops/kv_codec.h"

namespace qs::ops {
namespace {

int64_t total_tokens(std::span<const AttentionSeq> seqs) {
  int64_t n = 0;
  for (const auto& s : seqs) n += s.n_query;
  return n;
}

Status validate_params(const PagedKvLayer& cache, const AttentionParams& p) {
  if (p.n_heads <= 0 || p.n_heads % cache.n_kv_heads != 0) {
    return invalid_argument("paged_attention: n_heads " + std::to_string(p.n_heads) +
                            " is not a positive multiple of n_kv_heads " +
                            std::to_string(cache.n_kv_heads));
  }
  if (p.sliding_window < 0) return invalid_argument("paged_attention: negative sliding window");
  return ok_status();
}

// Offset of row `pos` of a sequence's keys (or values) for kv head `kvh`, in elements.
inline int64_t cache_offset(const PagedKvLayer& c, std::span<const int32_t> table, int64_t pos,
                            int64_t kvh) {
  const int64_t block = table[pos / c.block_size], off = pos % c.block_size;
  return ((block * c.block_size + off) * c.n_kv_heads + kvh) * c.head_dim;
}

// Eight independent partial sums: the compiler turns them into one SIMD register without
// needing permission to reassociate the float additions. The cache row is decoded element by
// element inside the loop (Codec::load), so an fp8 row is read as bytes and converted in
// registers; for f32 the load is the identity and this is a plain dot product.
template <class Codec>
inline float dot(const float* __restrict__ a, const typename Codec::T* __restrict__ b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * Codec::load(b[i + j]);
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * Codec::load(b[i]);
  return s;
}

// y += a * x, in fixed chunks of 8 so that -O2's cheap vectoriser takes them whole.
template <class Codec>
inline void axpy(float a, const typename Codec::T* __restrict__ x, float* __restrict__ y,
                 int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) y[i + j] += a * Codec::load(x[i + j]);
  }
  for (; i < n; ++i) y[i] += a * Codec::load(x[i]);
}

// Query tokens of one sequence handled together: each K/V row fetched from the cache then
// serves up to kQueryTile x group query rows while it sits in L1.
constexpr int64_t kQueryTile = 8;
// When there are fewer tiles than threads (decode of a few sequences), a tile's keys are
// split over threads in parts of at least this many keys (flash-decoding), and the parts'
// softmax statistics are merged afterwards.
constexpr int64_t kMinKeysPerPart = 64;

// One unit of parallel work: the keys [key_begin, key_end) of a tile of query tokens of one
// sequence, for one kv head and all query heads of its group.
struct Tile {
  int32_t seq;
  int32_t kv_head;
  int64_t first_query;  // index into the sequence's new tokens
  int64_t n_query;
  int64_t key_begin;
  int64_t key_end;
  // -1: the tile is whole and writes `out`; else its offset in the partial-result buffer,
  // [rows, 2 + head_dim] of (max score, sum of exp, unnormalised output).
  int64_t partial;
};

// Attention for every query row of the tile over its key range, on a cache of Codec's
// elements. Inlined into the per-dtype entry points below, which are compiled for AVX-512,
// AVX2+FMA and the baseline and picked at load time by the CPU (GCC target_clones).
// Hand-vectorised fp8 row loops (kernels/cpu/kv_fp8_cpu.h), when the CPU runs AVX-512.
struct Fp8RowKernels {
  float (*dot)(const float*, const uint8_t*, int64_t);
  void (*axpy)(float, const uint8_t*, float*, int64_t);
};
#if QS_X86
constexpr Fp8RowKernels kE4M3Avx512 = {kernels::cpu::kv_dot_e4m3_avx512,
                                       kernels::cpu::kv_axpy_e4m3_avx512};
constexpr Fp8RowKernels kE5M2Avx512 = {kernels::cpu::kv_dot_e5m2_avx512,
                                       kernels::cpu::kv_axpy_e5m2_avx512};

// The sixteen-key AVX-512 kernels of each cache dtype (kernels/cpu/attention_dots_cpu.h).
template <class Codec>
void dots16_for(const float* q, const typename Codec::T* k, int64_t stride, int n, int64_t hd,
                float* out) {
  if constexpr (Codec::kType == DType::kF32) {
    kernels::cpu::attn_dots16_f32_avx512(q, k, stride, n, hd, out);
  } else if constexpr (Codec::kType == DType::kBF16) {
    kernels::cpu::attn_dots16_bf16_avx512(q, k, stride, n, hd, out);
  } else if constexpr (Codec::kType == DType::kF8E4M3) {
    kernels::cpu::attn_dots16_e4m3_avx512(q, k, stride, n, hd, out);
  } else {
    kernels::cpu::attn_dots16_e5m2_avx512(q, k, stride, n, hd, out);
  }
}

template <class Codec>
void wsum16_for(const float* w, const typename Codec::T* v, int64_t stride, int n, int64_t hd,
                float* o) {
  if constexpr (Codec::kType == DType::kF32) {
    kernels::cpu::attn_wsum16_f32_avx512(w, v, stride, n, hd, o);
  } else if constexpr (Codec::kType == DType::kBF16) {
    kernels::cpu::attn_wsum16_bf16_avx512(w, v, stride, n, hd, o);
  } else if constexpr (Codec::kType == DType::kF8E4M3) {
    kernels::cpu::attn_wsum16_e4m3_avx512(w, v, stride, n, hd, o);
  } else {
    kernels::cpu::attn_wsum16_e5m2_avx512(w, v, stride, n, hd, o);
  }
}
#endif  // QS_X86

template <class Codec>
__attribute__((always_inline)) inline void attend_tile_impl(
    const float* q, const PagedKvLayer& c, const AttentionSeq& s, const AttentionParams& p,
    const Tile& tile, std::vector<float>& scores, float* out, float* partials,
    const Fp8RowKernels* rk, bool dots16) {
  using T = typename Codec::T;
  const int64_t hd = c.head_dim, group = p.n_heads / c.n_kv_heads;
  const auto* kc = static_cast<const T*>(c.k);
  const auto* vc = static_cast<const T*>(c.v);
  // The stored keys are k / k_scale: the scale folds into the score's factor, and v_scale
  // into the softmax normalisation (for f32 and bf16 both are 1).
  const float score_scale = p.scale * c.k_scale;
  const int64_t rows = tile.n_query * group;  // row r: token r / group, head r % group
  const int64_t first_pos = s.start_pos + tile.first_query;
  // Keys row r sees: [lo(pos), pos] of its position, clipped to the tile's key range.
  auto key_lo = [&](int64_t pos) {
    const int64_t lo = p.sliding_window > 0 ? pos - p.sliding_window + 1 : 0;
    return std::max(lo, tile.key_begin);
  };
  auto key_hi = [&](int64_t pos) { return std::min(pos + 1, tile.key_end); };  // exclusive
  auto out_row = [&](int64_t r) {
    const int64_t t = s.query_start + tile.first_query + r / group;
    return (t * p.n_heads + tile.kv_head * group + r % group) * hd;
  };
  const int64_t n_keys = tile.key_end - tile.key_begin;
  scores.resize(rows * n_keys);
  // Per row, once: its query and output pointers and its key range. In the key loops below
  // these were recomputed per (key, row) with two integer divisions each (r / group, r % group),
  // which cost more than the 64-element dot product itself at decode.
  thread_local std::vector<const float*> q_rows;
  thread_local std::vector<float*> o_rows;
  thread_local std::vector<int64_t> lo_rows, hi_rows;
  q_rows.resize(rows), o_rows.resize(rows), lo_rows.resize(rows), hi_rows.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = first_pos + r / group;
    q_rows[r] = q + out_row(r);
    o_rows[r] = tile.partial < 0 ? out + out_row(r) : partials + tile.partial + r * (2 + hd) + 2;
    lo_rows[r] = key_lo(pos);
    hi_rows[r] = key_hi(pos);
  }
  // The cache row of `key`: one division per key, not per element of the loop nest.
  auto row_of = [&](const T* base, int64_t key) {
    return base + cache_offset(c, s.block_table, key, tile.kv_head);
  };
#if QS_X86  // elsewhere dots16 is never set: the sixteen-key kernels are AVX-512's
  // With the sixteen-key kernels, keys go by in runs of at most 16 inside one block (a block's
  // rows lie at a fixed stride); a row's scores outside its causal range are written but never
  // read, and weigh nothing in the value sum below.
  const int64_t stride = c.n_kv_heads * hd;
  auto run_of = [&](int64_t key) {
    return static_cast<int>(
        std::min<int64_t>({16, tile.key_end - key, c.block_size - key % c.block_size}));
  };
  if (dots16) {
    float d16[16];
    for (int64_t key = tile.key_begin, n; key < tile.key_end; key += n) {
      n = run_of(key);
      const T* kr = row_of(kc, key);
      float* sk = scores.data() + (key - tile.key_begin);
      for (int64_t r = 0; r < rows; ++r) {
        if (key + n <= lo_rows[r] || key >= hi_rows[r]) continue;
        dots16_for<Codec>(q_rows[r], kr, stride, static_cast<int>(n), hd, d16);
        for (int64_t j = 0; j < n; ++j) sk[r * n_keys + j] = d16[j] * score_scale;
      }
    }
  } else
#endif
  {
    for (int64_t key = tile.key_begin; key < tile.key_end; ++key) {
      const T* kr = row_of(kc, key);
      float* sk = scores.data() + (key - tile.key_begin);
      for (int64_t r = 0; r < rows; ++r) {
        if (key < lo_rows[r] || key >= hi_rows[r]) continue;
        float d;
        if constexpr (std::is_same_v<T, uint8_t>) {
          d = rk != nullptr ? rk->dot(q_rows[r], kr, hd) : dot<Codec>(q_rows[r], kr, hd);
        } else {
          d = dot<Codec>(q_rows[r], kr, hd);
        }
        sk[r * n_keys] = d * score_scale;
      }
    }
  }
  std::vector<float> row_max(rows), row_sum(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t lo = lo_rows[r], hi = hi_rows[r];
    float* sr = scores.data() + r * n_keys - tile.key_begin;  // indexed by key
    float mx = -std::numeric_limits<float>::infinity(), sum = 0.0f;
    for (int64_t key = lo; key < hi; ++key) mx = std::max(mx, sr[key]);
    for (int64_t key = lo; key < hi; ++key) {
      sr[key] = std::exp(sr[key] - mx);
      sum += sr[key];
    }
    row_max[r] = mx;
    row_sum[r] = sum;
    std::fill_n(o_rows[r], hd, 0.0f);
  }
#if QS_X86
  if (dots16) {
    float w16[16];
    for (int64_t key = tile.key_begin, n; key < tile.key_end; key += n) {
      n = run_of(key);
      const T* vr = row_of(vc, key);
      const float* sk = scores.data() + (key - tile.key_begin);
      for (int64_t r = 0; r < rows; ++r) {
        if (key + n <= lo_rows[r] || key >= hi_rows[r]) continue;
        for (int64_t j = 0; j < n; ++j) {
          w16[j] = key + j >= lo_rows[r] && key + j < hi_rows[r] ? sk[r * n_keys + j] : 0.0f;
        }
        wsum16_for<Codec>(w16, vr, stride, static_cast<int>(n), hd, o_rows[r]);
      }
    }
  } else
#endif
  {
    for (int64_t key = tile.key_begin; key < tile.key_end; ++key) {
      const T* vr = row_of(vc, key);
      const float* sk = scores.data() + (key - tile.key_begin);
      for (int64_t r = 0; r < rows; ++r) {
        if (key < lo_rows[r] || key >= hi_rows[r]) continue;
        float* o = o_rows[r];
        const float w = sk[r * n_keys];
        if constexpr (std::is_same_v<T, uint8_t>) {
          if (rk != nullptr) {
            rk->axpy(w, vr, o, hd);
            continue;
          }
        }
        axpy<Codec>(w, vr, o, hd);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (tile.partial < 0) {
      const float inv = c.v_scale / row_sum[r];
      for (int64_t i = 0; i < hd; ++i) o_rows[r][i] *= inv;
    } else {
      partials[tile.partial + r * (2 + hd)] = row_max[r];
      partials[tile.partial + r * (2 + hd) + 1] = row_sum[r];
    }
  }
}

// One entry point per cache dtype, each cloned per ISA on x86 (elsewhere the compiler's
// baseline, which is aarch64's NEON).
#if QS_X86
#define QS_ATTEND_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define QS_ATTEND_CLONES
#endif
#define QS_ATTEND_TILE(name, Codec)                                                        \
  QS_ATTEND_CLONES void name(const float* q, const PagedKvLayer& c, const AttentionSeq& s, \
                             const AttentionParams& p, const Tile& tile,                   \
                             std::vector<float>& scores, float* out, float* partials,      \
                             const Fp8RowKernels* rk, bool dots16) {                       \
    attend_tile_impl<Codec>(q, c, s, p, tile, scores, out, partials, rk, dots16);          \
  }
QS_ATTEND_TILE(attend_tile_f32, KvF32)
QS_ATTEND_TILE(attend_tile_bf16, KvBF16)
QS_ATTEND_TILE(attend_tile_e4m3, KvFp8E4M3)
QS_ATTEND_TILE(attend_tile_e5m2, KvFp8E5M2)
#undef QS_ATTEND_TILE
#undef QS_ATTEND_CLONES

using AttendTileFn = void (*)(const float*, const PagedKvLayer&, const AttentionSeq&,
                              const AttentionParams&, const Tile&, std::vector<float>&, float*,
                              float*, const Fp8RowKernels*, bool);

// The AVX-512 fp8 row loops for a cache of `t`, or null (other dtypes, or no AVX-512: the
// portable codec loops run).
const Fp8RowKernels* fp8_row_kernels_for(DType t) {
#if QS_X86
  if (kernels::active_isa() != kernels::Isa::kAvx512) return nullptr;
  if (t == DType::kF8E4M3) return &kE4M3Avx512;
  if (t == DType::kF8E5M2) return &kE5M2Avx512;
#endif
  return nullptr;
}

// Chosen once per call (validate_paged_batch has checked the dtype).
AttendTileFn attend_tile_for(DType t) {
  switch (t) {
    case DType::kBF16:
      return attend_tile_bf16;
    case DType::kF8E4M3:
      return attend_tile_e4m3;
    case DType::kF8E5M2:
      return attend_tile_e5m2;
    default:
      return attend_tile_f32;
  }
}

template <class Codec>
void kv_write(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs, const float* k,
              const float* v) {
  using T = typename Codec::T;
  const int64_t row = cache.n_kv_heads * cache.head_dim;
  auto* kc = static_cast<T*>(cache.k);
  auto* vc = static_cast<T*>(cache.v);
  // vLLM divides (x / scale) rather than multiplying by a reciprocal; so do we. For f32 and
  // bf16 the scales are 1 and the division is exact.
  const float ks = cache.k_scale, vs = cache.v_scale;
  for (const auto& s : seqs) {
    for (int64_t j = 0; j < s.n_query; ++j) {
      const int64_t pos = s.start_pos + j;
      const int64_t slot =
          s.block_table[pos / cache.block_size] * cache.block_size + pos % cache.block_size;
      const float* kr = k + (s.query_start + j) * row;
      const float* vr = v + (s.query_start + j) * row;
      T* kd = kc + slot * row;
      T* vd = vc + slot * row;
      for (int64_t i = 0; i < row; ++i) {
        kd[i] = Codec::store(kr[i] / ks);
        vd[i] = Codec::store(vr[i] / vs);
      }
    }
  }
}

}  // namespace

bool kv_cache_dtype_supported(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF8E4M3 || t == DType::kF8E5M2;
}

Status validate_paged_batch(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs,
                            int64_t n_tokens) {
  if (!kv_cache_dtype_supported(cache.dtype)) {
    return unimplemented(std::string("paged attention: no kernel for a KV cache of ") +
                         dtype_name(cache.dtype));
  }
  if (!(cache.k_scale > 0.0f) || !(cache.v_scale > 0.0f) || std::isinf(cache.k_scale) ||
      std::isinf(cache.v_scale)) {
    return invalid_argument("paged attention: KV cache scales must be positive and finite, got " +
                            std::to_string(cache.k_scale) + " and " +
                            std::to_string(cache.v_scale));
  }
  if (cache.k == nullptr || cache.v == nullptr || cache.block_size <= 0 || cache.n_kv_heads <= 0 ||
      cache.head_dim <= 0) {
    return invalid_argument("paged attention: empty or malformed KV cache layer");
  }
  int64_t next = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttentionSeq& s = seqs[i];
    const std::string where = "paged attention: sequence " + std::to_string(i) + ": ";
    if (s.query_start != next || s.n_query <= 0 || s.start_pos < 0) {
      return invalid_argument(where + "query rows [" + std::to_string(s.query_start) + ", +" +
                              std::to_string(s.n_query) + ") do not follow the previous ones at " +
                              std::to_string(next));
    }
    next += s.n_query;
    const int64_t need = (s.start_pos + s.n_query + cache.block_size - 1) / cache.block_size;
    if (static_cast<int64_t>(s.block_table.size()) < need) {
      return invalid_argument(where + "block table of " + std::to_string(s.block_table.size()) +
                              " blocks cannot hold " + std::to_string(s.start_pos + s.n_query) +
                              " tokens");
    }
    for (int64_t b = 0; b < need; ++b) {
      if (s.block_table[b] < 0 || s.block_table[b] >= cache.n_blocks) {
        return invalid_argument(where + "block id " + std::to_string(s.block_table[b]) +
                                " outside the cache's " + std::to_string(cache.n_blocks) +
                                " blocks");
      }
    }
  }
  if (next != n_tokens) {
    return invalid_argument("paged attention: sequences cover " + std::to_string(next) +
                            " tokens, the batch has " + std::to_string(n_tokens));
  }
  return ok_status();
}

void paged_kv_write(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs, const float* k,
                    const float* v) {
  switch (cache.dtype) {
    case DType::kBF16:
      return kv_write<KvBF16>(cache, seqs, k, v);
    case DType::kF8E4M3:
      return kv_write<KvFp8E4M3>(cache, seqs, k, v);
    case DType::kF8E5M2:
      return kv_write<KvFp8E5M2>(cache, seqs, k, v);
    default:
      QS_CHECK_MSG(cache.dtype == DType::kF32, "paged_kv_write: unsupported KV cache dtype");
      return kv_write<KvF32>(cache, seqs, k, v);
  }
}

Status paged_attention_ref(const float* q, const PagedKvLayer& cache,
                           std::span<const AttentionSeq> seqs, const AttentionParams& params,
                           float* out) {
  QS_RETURN_IF_ERROR(validate_params(cache, params));
  QS_RETURN_IF_ERROR(validate_paged_batch(cache, seqs, total_tokens(seqs)));
  const int64_t hd = cache.head_dim, group = params.n_heads / cache.n_kv_heads;
  std::vector<float> scores;
  for (const auto& s : seqs) {
    for (int64_t j = 0; j < s.n_query; ++j) {
      const int64_t t = s.query_start + j, pos = s.start_pos + j;
      const int64_t first =
          params.sliding_window > 0 ? std::max<int64_t>(0, pos - params.sliding_window + 1) : 0;
      for (int64_t h = 0; h < params.n_heads; ++h) {
        const float* qh = q + (t * params.n_heads + h) * hd;
        scores.assign(pos + 1 - first, 0.0f);
        for (int64_t p = first; p <= pos; ++p) {
          const int64_t kr = cache_offset(cache, s.block_table, p, h / group);
          float d = 0.0f;
          for (int64_t i = 0; i < hd; ++i) {
            d += qh[i] * load_as_f32(cache.dtype, cache.k, kr + i) * cache.k_scale;
          }
          scores[p - first] = d * params.scale;
        }
        softmax(scores.data(), static_cast<int64_t>(scores.size()));
        float* oh = out + (t * params.n_heads + h) * hd;
        std::fill_n(oh, hd, 0.0f);
        for (int64_t p = first; p <= pos; ++p) {
          const int64_t vr = cache_offset(cache, s.block_table, p, h / group);
          for (int64_t i = 0; i < hd; ++i) {
            oh[i] += scores[p - first] * load_as_f32(cache.dtype, cache.v, vr + i) * cache.v_scale;
          }
        }
      }
    }
  }
  return ok_status();
}

Status paged_attention(const float* q, const PagedKvLayer& cache,
                       std::span<const AttentionSeq> seqs, const AttentionParams& params,
                       float* out, ThreadPool& pool) {
  QS_RETURN_IF_ERROR(validate_params(cache, params));
  const int64_t n_tokens = total_tokens(seqs);
  QS_RETURN_IF_ERROR(validate_paged_batch(cache, seqs, n_tokens));
  const int64_t hd = cache.head_dim, group = params.n_heads / cache.n_kv_heads;
  int64_t n_whole = 0;
  for (const auto& sq : seqs) n_whole += (sq.n_query + kQueryTile - 1) / kQueryTile;
  n_whole *= cache.n_kv_heads;
  const int64_t want_parts = (pool.n_threads() + n_whole - 1) / n_whole;

  std::vector<Tile> tiles;
  struct Split {  // a tile cut into parts [first, first + n_parts) of `tiles`
    int64_t first, n_parts;
  };
  std::vector<Split> splits;
  int64_t partial_floats = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttentionSeq& sq = seqs[i];
    for (int64_t j = 0; j < sq.n_query; j += kQueryTile) {
      const int64_t n_query = std::min(kQueryTile, sq.n_query - j);
      const int64_t first_pos = sq.start_pos + j, last_pos = first_pos + n_query - 1;
      const int64_t key_begin = params.sliding_window > 0
                                    ? std::max<int64_t>(0, first_pos - params.sliding_window + 1)
                                    : 0;
      const int64_t n_keys = last_pos + 1 - key_begin;
      const int64_t parts = std::max<int64_t>(1, std::min(want_parts, n_keys / kMinKeysPerPart));
      for (int64_t kvh = 0; kvh < cache.n_kv_heads; ++kvh) {
        Tile t{static_cast<int32_t>(i),
               static_cast<int32_t>(kvh),
               j,
               n_query,
               key_begin,
               last_pos + 1,
               -1};
        if (parts == 1) {
          tiles.push_back(t);
          continue;
        }
        splits.push_back({static_cast<int64_t>(tiles.size()), parts});
        for (int64_t k = 0; k < parts; ++k) {
          t.key_begin = key_begin + n_keys * k / parts;
          t.key_end = key_begin + n_keys * (k + 1) / parts;
          t.partial = partial_floats;
          partial_floats += n_query * group * (2 + hd);
          tiles.push_back(t);
        }
      }
    }
  }
  std::vector<float> partials(partial_floats);
  // Later tiles of a prompt see more keys than earlier ones, so threads take every
  // n_threads-th tile rather than a contiguous range: the work evens out.
  const int64_t n_tiles = static_cast<int64_t>(tiles.size());
  const AttendTileFn attend_tile = attend_tile_for(cache.dtype);
  const Fp8RowKernels* rk = fp8_row_kernels_for(cache.dtype);
  const bool dots16 = kernels::active_isa() == kernels::Isa::kAvx512 && cache.head_dim % 16 == 0 &&
                      cache.head_dim <= 256;
  pool.run([&](int thread, int n_threads) {
    std::vector<float> scores;  // [rows, n_keys] of the current tile
    for (int64_t i = thread; i < n_tiles; i += n_threads) {
      attend_tile(q, cache, seqs[tiles[i].seq], params, tiles[i], scores, out, partials.data(), rk,
                  dots16);
    }
  });
  // Merge the parts of split tiles: softmax over all keys from per-part (max, sum, output).
  for (const Split& sp : splits) {
    const Tile& t0 = tiles[sp.first];
    const AttentionSeq& sq = seqs[t0.seq];
    for (int64_t r = 0; r < t0.n_query * group; ++r) {
      const int64_t t = sq.query_start + t0.first_query + r / group;
      float* o = out + (t * params.n_heads + t0.kv_head * group + r % group) * hd;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < sp.n_parts; ++k) {
        mx = std::max(mx, partials[tiles[sp.first + k].partial + r * (2 + hd)]);
      }
      float sum = 0.0f;
      std::fill_n(o, hd, 0.0f);
      for (int64_t k = 0; k < sp.n_parts; ++k) {
        const float* part = partials.data() + tiles[sp.first + k].partial + r * (2 + hd);
        if (part[1] == 0.0f) continue;  // no key of this part is visible to the row
        const float w = std::exp(part[0] - mx);
        sum += w * part[1];
        axpy<KvF32>(w, part + 2, o, hd);
      }
      const float inv = cache.v_scale / sum;
      for (int64_t i = 0; i < hd; ++i) o[i] *= inv;
    }
  }
  return ok_status();
}

}  // namespace qs::ops
