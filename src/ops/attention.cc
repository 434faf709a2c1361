// ops: paged attention, reference and fast versions (see attention.h).
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/elementwise.h"

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

// Row `pos` of a sequence's keys (or values) for kv head `kvh`.
inline const float* cache_row(const float* base, const PagedKvLayer& c,
                              std::span<const int32_t> table, int64_t pos, int64_t kvh) {
  const int64_t block = table[pos / c.block_size], off = pos % c.block_size;
  return base + ((block * c.block_size + off) * c.n_kv_heads + kvh) * c.head_dim;
}

// Eight independent partial sums: the compiler turns them into one SIMD register without
// needing permission to reassociate the float additions.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

Status validate_paged_batch(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs,
                            int64_t n_tokens) {
  if (cache.dtype != DType::kF32) {
    return unimplemented(std::string("paged attention: no kernel for a KV cache of ") +
                         dtype_name(cache.dtype));
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
  const int64_t row = cache.n_kv_heads * cache.head_dim;
  auto* kc = static_cast<float*>(cache.k);
  auto* vc = static_cast<float*>(cache.v);
  for (const auto& s : seqs) {
    for (int64_t j = 0; j < s.n_query; ++j) {
      const int64_t pos = s.start_pos + j;
      const int64_t slot =
          s.block_table[pos / cache.block_size] * cache.block_size + pos % cache.block_size;
      std::copy_n(k + (s.query_start + j) * row, row, kc + slot * row);
      std::copy_n(v + (s.query_start + j) * row, row, vc + slot * row);
    }
  }
}

Status paged_attention_ref(const float* q, const PagedKvLayer& cache,
                           std::span<const AttentionSeq> seqs, const AttentionParams& params,
                           float* out) {
  QS_RETURN_IF_ERROR(validate_params(cache, params));
  QS_RETURN_IF_ERROR(validate_paged_batch(cache, seqs, total_tokens(seqs)));
  const int64_t hd = cache.head_dim, group = params.n_heads / cache.n_kv_heads;
  const auto* kc = static_cast<const float*>(cache.k);
  const auto* vc = static_cast<const float*>(cache.v);
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
          const float* kr = cache_row(kc, cache, s.block_table, p, h / group);
          float d = 0.0f;
          for (int64_t i = 0; i < hd; ++i) d += qh[i] * kr[i];
          scores[p - first] = d * params.scale;
        }
        softmax(scores.data(), static_cast<int64_t>(scores.size()));
        float* oh = out + (t * params.n_heads + h) * hd;
        std::fill_n(oh, hd, 0.0f);
        for (int64_t p = first; p <= pos; ++p) {
          const float* vr = cache_row(vc, cache, s.block_table, p, h / group);
          for (int64_t i = 0; i < hd; ++i) oh[i] += scores[p - first] * vr[i];
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
  const int64_t hd = cache.head_dim, n_kv = cache.n_kv_heads;
  const int64_t group = params.n_heads / n_kv;
  const auto* kc = static_cast<const float*>(cache.k);
  const auto* vc = static_cast<const float*>(cache.v);

  // Token -> its sequence, so that the work items (token, kv head) can be split evenly.
  std::vector<int32_t> seq_of(n_tokens);
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::fill_n(seq_of.begin() + seqs[i].query_start, seqs[i].n_query, static_cast<int32_t>(i));
  }
  pool.parallel_for(n_tokens * n_kv, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;  // [group, n_keys]
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / n_kv, kvh = item % n_kv;
      const AttentionSeq& s = seqs[seq_of[t]];
      const int64_t pos = s.start_pos + (t - s.query_start);
      const int64_t first =
          params.sliding_window > 0 ? std::max<int64_t>(0, pos - params.sliding_window + 1) : 0;
      const int64_t n_keys = pos + 1 - first;
      scores.resize(group * n_keys);
      const float* q0 = q + (t * params.n_heads + kvh * group) * hd;
      // Each key row is read once and scored against every query head of its group.
      for (int64_t p = first; p <= pos; ++p) {
        const float* kr = cache_row(kc, cache, s.block_table, p, kvh);
        for (int64_t g = 0; g < group; ++g) {
          scores[g * n_keys + (p - first)] = dot(q0 + g * hd, kr, hd) * params.scale;
        }
      }
      for (int64_t g = 0; g < group; ++g) softmax(scores.data() + g * n_keys, n_keys);
      float* o0 = out + (t * params.n_heads + kvh * group) * hd;
      std::fill_n(o0, group * hd, 0.0f);
      for (int64_t p = first; p <= pos; ++p) {
        const float* vr = cache_row(vc, cache, s.block_table, p, kvh);
        for (int64_t g = 0; g < group; ++g)
          axpy(scores[g * n_keys + (p - first)], vr, o0 + g * hd, hd);
      }
    }
  });
  return ok_status();
}

}  // namespace qs::ops
