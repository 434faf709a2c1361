// kernels/cpu: fused causal attention with bf16 products (attention_bf16_cpu.h), flash-attention
// style: per tile of kRows queries and block of kKeys keys, S = Q K^T into an L1 tile, an
// online softmax (running max and sum, the output tile rescaled when the max grows), P rounded
// to bf16, O += P V. The scores never leave L1, and K and V are converted to bf16 once per
// (sequence, kv head) instead of once per GEMM call, i.e. per head and 64-row block, as the
// ops::gemm path of quant/grad_ops.cc does.
// Layouts, in the pairs vdpbf16ps multiplies (one dword = two bf16, the even one low):
//   K: panels of kNR keys, each head_dim / 2 pair steps x kNR dwords; dword (s, c) holds dims
//      2s, 2s + 1 of key c (pairs along head_dim, the reduction of Q K^T).
//   V: panels of kNR dims, each n_keys / 2 pair steps x kNR dwords; dword (s, c) holds dim c of
//      keys 2s, 2s + 1 (pairs along keys, the reduction of P V).
//   Q and P: rows of pairs, as they come (Q along head_dim, P along keys).
// Both products run on one 8 x 32 register tile (16 accumulators), broadcasting a pair of the
// row operand into two zmm of the panel. Causal: blocks past a tile's last query are skipped,
// the diagonal block's future keys masked, and micro tiles wholly above the diagonal skipped.
// GCC 12 reports the _mm512_undefined_* inside its own cast intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention_bf16_cpu.h"
#include "kernels/cpu/exp_avx512.h"

namespace qs::kernels::cpu {
namespace {

constexpr int64_t kRows = 64;  // queries per tile
constexpr int64_t kKeys = 64;  // keys per block: four zmm of scores per row
constexpr int kMR = 8;         // rows of the register tile
constexpr int64_t kNR = 32;    // columns of the register tile (two zmm)
// The softmax runs 16 rows at a time (reduce16), four zmm of scores a row.
static_assert(kRows % 16 == 0 && kRows % kMR == 0 && kKeys == 4 * 16 && kKeys % kNR == 0,
              "tile shapes");

int64_t round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}

__mmask16 lanes(int64_t count) {
  if (count <= 0) return 0;
  return count >= 16 ? __mmask16(0xffff) : __mmask16((1u << count) - 1);
}

__m512bh as_bh(__m512i v) {
  return reinterpret_cast<__m512bh>(v);
}

// One call's buffers, carved from the caller's scratch (sizes in dwords, each 64-byte aligned).
struct Buffers {
  uint32_t* kp;  // [n_keys / kNR panels][head_dim / 2][kNR]: bf16(scale K) pairs
  uint32_t* vp;  // [v_panels][n_keys / 2][kNR]: bf16(V) pairs
  uint32_t* qp;  // [kRows][head_dim / 2]: one tile of one head's queries
  float* s;      // [kRows][kKeys]: scores of one block
  uint32_t* pp;  // [kRows][kKeys / 2]: their probabilities
  float* o;      // [kRows][o_ld]: unnormalised output
  float* m;      // [kRows]: running max
  float* l;      // [kRows]: running sum of exp(s - m)
  float* alpha;  // [kRows]: exp(old max - new max) of the current block
  int64_t n_keys, v_panels, o_ld;
};

// Lays the buffers out from `base` (nullptr: only sizes them); returns the bytes used.
int64_t layout(int64_t seqlen, int64_t head_dim, char* base, Buffers* b) {
  b->n_keys = round_up(seqlen, kKeys);
  b->v_panels = (head_dim + kNR - 1) / kNR;
  b->o_ld = b->v_panels * kNR;
  int64_t at = 0;
  auto take = [&](int64_t dwords) {
    char* p = base != nullptr ? base + at : nullptr;
    at += round_up(dwords, 16) * 4;
    return p;
  };
  b->kp = reinterpret_cast<uint32_t*>(take(b->n_keys * head_dim / 2));
  b->vp = reinterpret_cast<uint32_t*>(take(b->v_panels * kNR * b->n_keys / 2));
  b->qp = reinterpret_cast<uint32_t*>(take(kRows * head_dim / 2));
  b->s = reinterpret_cast<float*>(take(kRows * kKeys));
  b->pp = reinterpret_cast<uint32_t*>(take(kRows * kKeys / 2));
  b->o = reinterpret_cast<float*>(take(kRows * b->o_ld));
  b->m = reinterpret_cast<float*>(take(kRows));
  b->l = reinterpret_cast<float*>(take(kRows));
  b->alpha = reinterpret_cast<float*>(take(kRows));
  return at;
}

// The rows of Q, K, V and out lie a whole token apart (q_ld, kv_ld floats), a stride the
// hardware prefetchers did not follow: each conversion or store stalled on its row, 5-10 % of
// the time at 2048 tokens. Each loop over rows asks for the row kAhead further on.
constexpr int64_t kAhead = 8;

void prefetch_row(const float* row, int64_t n) {
  for (int64_t c = 0; c < n; c += 16)
    _mm_prefetch(reinterpret_cast<const char*>(row + c), _MM_HINT_T0);
}

// n (even) floats times `mul` as n / 2 bf16 pairs, rounded to nearest even (vcvtne2ps2bf16).
void to_pairs(const float* x, int64_t n, float mul, uint32_t* out) {
  const __m512 f = _mm512_set1_ps(mul);
  for (int64_t i = 0; i < n; i += 32) {
    const __m512 lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(n - i), x + i), f);
    const __m512 hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(n - i - 16), x + i + 16), f);
    const auto h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    _mm512_mask_storeu_epi32(out + i / 2, lanes((n - i) / 2), h);
  }
}

// K times scale, key panels (see the top); keys past seqlen are zero.
void pack_k(const CausalAttentionBf16Args& a, const Buffers& b) {
  const int64_t steps = a.head_dim / 2;
  alignas(64) uint32_t row[kCausalAttentionBf16MaxHeadDim / 2] = {};
  for (int64_t j = 0; j < b.n_keys; ++j) {
    if (j + kAhead < a.seqlen) prefetch_row(a.k + (j + kAhead) * a.kv_ld, a.head_dim);
    if (j < a.seqlen) {
      to_pairs(a.k + j * a.kv_ld, a.head_dim, a.scale, row);
    } else {
      std::fill_n(row, steps, 0u);
    }
    uint32_t* col = b.kp + (j / kNR) * steps * kNR + j % kNR;
    for (int64_t s = 0; s < steps; ++s) col[s * kNR] = row[s];
  }
}

// V, dim panels (see the top); keys past seqlen and dims past head_dim are zero.
void pack_v(const CausalAttentionBf16Args& a, const Buffers& b) {
  // Word w of the result takes word w / 2 of the even key's half (words 0-15 of the
  // conversion) when w is even, of the odd key's (words 16-31) when odd.
  alignas(64) static const uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                       21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                       11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  const int64_t steps = b.n_keys / 2;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t j = 2 * s;
    if (j + kAhead + 1 < a.seqlen) {
      prefetch_row(a.v + (j + kAhead) * a.kv_ld, a.head_dim);
      prefetch_row(a.v + (j + kAhead + 1) * a.kv_ld, a.head_dim);
    }
    const float* even = j < a.seqlen ? a.v + j * a.kv_ld : nullptr;
    const float* odd = j + 1 < a.seqlen ? a.v + (j + 1) * a.kv_ld : nullptr;
    for (int64_t c = 0; c < b.o_ld; c += 16) {
      const __mmask16 live = lanes(a.head_dim - c);
      const __m512 e =
          even != nullptr ? _mm512_maskz_loadu_ps(live, even + c) : _mm512_setzero_ps();
      const __m512 o = odd != nullptr ? _mm512_maskz_loadu_ps(live, odd + c) : _mm512_setzero_ps();
      const auto h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(o, e));
      _mm512_store_si512(b.vp + (c / kNR) * steps * kNR + s * kNR + c % kNR,
                         _mm512_permutexvar_epi16(idx, h));
    }
  }
}

// C[kMR x kNR] = sum over `steps` pair steps of A(r, s) B(s, :), plus C * row_scale[r] when
// row_scale != nullptr (the online softmax's rescale of the output, folded into the load).
// A: row r's pairs at a + r * a_ld; B: kNR dwords a step; C 64-byte aligned rows of ldc floats.
void tile(const uint32_t* a, int64_t a_ld, const uint32_t* b, int64_t steps, float* c, int64_t ldc,
          const float* row_scale) {
  __m512 acc[kMR][2];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
    if (row_scale != nullptr) {
      const __m512 f = _mm512_set1_ps(row_scale[r]);
      acc[r][0] = _mm512_mul_ps(_mm512_load_ps(c + r * ldc), f);
      acc[r][1] = _mm512_mul_ps(_mm512_load_ps(c + r * ldc + 16), f);
    } else {
      acc[r][0] = _mm512_setzero_ps();
      acc[r][1] = _mm512_setzero_ps();
    }
  }
  for (int64_t s = 0; s < steps; ++s) {
    const __m512bh b0 = as_bh(_mm512_load_si512(b + s * kNR));
    const __m512bh b1 = as_bh(_mm512_load_si512(b + s * kNR + 16));
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const __m512bh av = as_bh(_mm512_set1_epi32(static_cast<int>(a[r * a_ld + s])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
    _mm512_store_ps(c + r * ldc, acc[r][0]);
    _mm512_store_ps(c + r * ldc + 16, acc[r][1]);
  }
}

// Lane r of the result = op over the 16 lanes of v[r]: one transposing tree (quarters, then
// halves of quarters, then pairs) instead of 16 horizontal reductions, whose shuffles and
// scalar tails cost a quarter of the softmax when done row by row.
template <class Op>
__m512 reduce16(const __m512* v, Op op) {
  __m512 w[8], z[4];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {  // [row 2k: 8 partials | row 2k + 1: 8 partials]
    w[k] = op(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {  // quarter q: 4 partials of row 4k + q
    z[k] = op(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // quarter q: 2 partials each of rows q and q + 4 (u0), q + 8 and q + 12 (u1), interleaved
  const __m512 u0 = op(_mm512_unpacklo_ps(z[0], z[1]), _mm512_unpackhi_ps(z[0], z[1]));
  const __m512 u1 = op(_mm512_unpacklo_ps(z[2], z[3]), _mm512_unpackhi_ps(z[2], z[3]));
  // lane 4q + k: row q + 4k
  const __m512 f = op(_mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(1, 0, 1, 0)),
                      _mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), f);
}

// Rows r0 .. r0 + 15 of the block at key j0, row r seeing live[r - r0] keys (j0 .. its query;
// 0 for a padding row): folds the scores into the running max and sum, writes P = bf16(exp(s -
// max)) (zeros past the live keys) and the factor alpha that rescales each row's output.
void softmax_rows16(const Buffers& b, int64_t r0, const int64_t* live) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 part[16];
  for (int k = 0; k < 16; ++k) {
    const float* srow = b.s + (r0 + k) * kKeys;
    __m512 mx = neg_inf;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c)
      mx = _mm512_max_ps(mx, _mm512_mask_load_ps(neg_inf, lanes(live[k] - 16 * c), srow + 16 * c));
    part[k] = mx;
  }
  // A row with no live key keeps its max (alpha 1, P 0); the first block's alpha, exp(-inf),
  // multiplies l = 0 and no output (the first P V starts from zero).
  const __m512 m_old = _mm512_load_ps(b.m + r0);
  const __m512 m_new =
      _mm512_max_ps(m_old, reduce16(part, [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); }));
  const __m512 alpha =
      _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_old, m_new, _CMP_EQ_OQ),
                           exp_ps(_mm512_sub_ps(m_old, m_new)), _mm512_set1_ps(1.0f));
  _mm512_store_ps(b.m + r0, m_new);
  _mm512_store_ps(b.alpha + r0, alpha);
  for (int k = 0; k < 16; ++k) {
    uint32_t* p = b.pp + (r0 + k) * (kKeys / 2);
    const float* srow = b.s + (r0 + k) * kKeys;
    const __m512 shift = _mm512_set1_ps(b.m[r0 + k]);
    __m512 e[4];
    __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __mmask16 mk = lanes(live[k] - 16 * c);
      e[c] = _mm512_maskz_mov_ps(
          mk, exp_ps(_mm512_sub_ps(_mm512_maskz_load_ps(mk, srow + 16 * c), shift)));
      sum = _mm512_add_ps(sum, e[c]);
    }
    part[k] = sum;
    _mm512_store_si512(p, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e[1], e[0])));
    _mm512_store_si512(p + 16, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e[3], e[2])));
  }
  _mm512_store_ps(
      b.l + r0,
      _mm512_fmadd_ps(_mm512_load_ps(b.l + r0), alpha,
                      reduce16(part, [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); })));
}

// Queries i0 .. i0 + kRows - 1 (those below seqlen) of head t of the group.
void query_tile(const CausalAttentionBf16Args& a, const Buffers& b, int64_t t, int64_t i0) {
  const int64_t steps_qk = a.head_dim / 2, rows = std::min(kRows, a.seqlen - i0);
  const int64_t slivers = (rows + kMR - 1) / kMR;
  for (int64_t r = 0; r < slivers * kMR; ++r) {
    uint32_t* qr = b.qp + r * steps_qk;
    if (r + kAhead < rows)
      prefetch_row(a.q + (i0 + r + kAhead) * a.q_ld + t * a.head_dim, a.head_dim);
    if (r < rows) {
      to_pairs(a.q + (i0 + r) * a.q_ld + t * a.head_dim, a.head_dim, 1.0f, qr);
    } else {
      std::fill_n(qr, steps_qk, 0u);
    }
  }
  std::fill_n(b.m, kRows, -std::numeric_limits<float>::infinity());
  std::fill_n(b.l, kRows, 0.0f);
  const int64_t last_query = i0 + rows - 1;
  for (int64_t j0 = 0; j0 <= last_query; j0 += kKeys) {
    // S = Q K^T over the micro tiles with a key at or below their last query.
    for (int64_t q0 = 0; q0 < slivers * kMR; q0 += kMR) {
      const int64_t sliver_last = std::min(i0 + q0 + kMR - 1, last_query);
      for (int64_t c0 = 0; c0 < kKeys && j0 + c0 <= sliver_last; c0 += kNR) {
        tile(b.qp + q0 * steps_qk, steps_qk, b.kp + (j0 + c0) * steps_qk, steps_qk,
             b.s + q0 * kKeys + c0, kKeys, nullptr);
      }
    }
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      int64_t live[16];
      for (int k = 0; k < 16; ++k) {
        const int64_t i = i0 + r0 + k;
        live[k] = i < a.seqlen ? std::min(kKeys, i - j0 + 1) : 0;
      }
      softmax_rows16(b, r0, live);
    }
    // O = alpha O + P V over the keys up to each sliver's last query (P is zero past a row's).
    const int64_t v_steps = b.n_keys / 2;
    for (int64_t q0 = 0; q0 < slivers * kMR; q0 += kMR) {
      const int64_t keys = std::min(kKeys, std::min(i0 + q0 + kMR - 1, last_query) - j0 + 1);
      if (keys <= 0) continue;  // every row's alpha is 1 and its P zero
      for (int64_t p = 0; p < b.v_panels; ++p) {
        tile(b.pp + q0 * (kKeys / 2), kKeys / 2, b.vp + (p * v_steps + j0 / 2) * kNR,
             (keys + 1) / 2, b.o + q0 * b.o_ld + p * kNR, b.o_ld, j0 == 0 ? nullptr : b.alpha + q0);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    if (r + kAhead < rows)
      prefetch_row(a.out + (i + kAhead) * a.out_ld + t * a.head_dim, a.head_dim);
    const float l = b.l[r];  // >= 1: the max contributes exp(0)
    const __m512 inv = _mm512_set1_ps(1.0f / l);
    float* out = a.out + i * a.out_ld + t * a.head_dim;
    for (int64_t c = 0; c < a.head_dim; c += 16) {
      _mm512_mask_storeu_ps(out + c, lanes(a.head_dim - c),
                            _mm512_mul_ps(_mm512_load_ps(b.o + r * b.o_ld + c), inv));
    }
    a.lse[t * a.seqlen + i] = b.m[r] + std::log(l);
  }
}

}  // namespace

bool causal_attention_bf16_avx512_supported() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512bf16");
}

int64_t causal_attention_bf16_avx512_scratch_bytes(int64_t seqlen, int64_t head_dim) {
  Buffers b;
  return layout(seqlen, head_dim, nullptr, &b) + 64;  // + 64: room to align
}

void causal_attention_bf16_avx512(const CausalAttentionBf16Args& a, void* scratch) {
  Buffers b;
  auto* base =
      reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
  layout(a.seqlen, a.head_dim, base, &b);
  pack_k(a, b);
  pack_v(a, b);
  for (int64_t t = 0; t < a.group; ++t) {
    for (int64_t i0 = 0; i0 < a.seqlen; i0 += kRows) query_tile(a, b, t, i0);
  }
}

}  // namespace qs::kernels::cpu
