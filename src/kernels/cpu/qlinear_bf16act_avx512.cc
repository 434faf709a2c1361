// kernels/cpu: bf16-activation quantized linear on AVX512-BF16 (see qlinear_bf16act.h). Per
// output column, each 32-input block's codes become 32 bf16 values (4-bit: a 32-entry table
// lookup on the nibbles, exact since codes are integers < 256), and vdpbf16ps multiplies them
// with up to four rows of bf16 activations into f32 lanes; each group's lanes are scaled by
// its f32 scale, and the zero term meets the precomputed group sum.
// GCC 12's intrinsic headers trip -Wmaybe-uninitialized on _mm512_undefined (as in the other
// AVX-512 kernels).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The fp8 decoder's byte lookups need AVX512-VBMI (Ice Lake, Sapphire Rapids, Zen 4: every
// CPU with AVX512-BF16 but Cooper Lake); CMakeLists.txt builds only this file for it, and
// bf16act_supported() checks it at run time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/qlinear_bf16act.h"

namespace qs::kernels::cpu {
namespace {

constexpr int kRows = 4;
constexpr int64_t kPrefetchBytes = 16 * 1024;

// The bf16 bits of 0..31 (integers have at most 5 significant bits here: exact).
__m512i code_table() {
  alignas(64) uint16_t t[32];
  for (int v = 0; v < 32; ++v) t[v] = f32_to_bf16(static_cast<float>(v));
  return _mm512_load_si512(t);
}

// 32 e4m3fn codes as bf16 of 2^-8 times their value: each byte moves into the sign and the
// exponent-mantissa bits of an f16 (e4m3's exponent bias is 8 below f16's, and e4m3
// subnormals land on f16 subnormals), vcvtph2ps widens exactly, and with at most 4
// significant bits the bf16 rounding is exact too. The caller multiplies by 256.
inline __m512bh fp8_bf16(const uint8_t* p) {
  const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x80)), 8);
  const __m512i mag = _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x7F)), 7);
  const __m512i h = _mm512_or_si512(sign, mag);
  const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
  return _mm512_cvtne2ps_pbh(hi, lo);
}

// The bf16 bits of 2^-8 times each e4m3 magnitude 0..127, as low and high bytes, 64 bytes
// per table half (vpermi2b takes a 7-bit index: the sign bit of a code is ignored).
struct Fp8Tables {
  __m512i lo0, lo1, hi0, hi1;
};
Fp8Tables fp8_tables() {
  alignas(64) uint8_t lo[128], hi[128];
  for (int m = 0; m < 128; ++m) {
    const uint16_t b = f32_to_bf16(std::ldexp(fp8_e4m3_to_f32(static_cast<uint8_t>(m)), -8));
    lo[m] = static_cast<uint8_t>(b & 0xFF);
    hi[m] = static_cast<uint8_t>(b >> 8);
  }
  return {_mm512_load_si512(lo), _mm512_load_si512(lo + 64), _mm512_load_si512(hi),
          _mm512_load_si512(hi + 64)};
}

// Two blocks (64 codes, stored in fp8_stored_index order) as bf16 of 2^-8 times their
// values: two byte lookups, the sign or-ed into the high byte, two unpacks. 6 instructions
// per 64 weights, against 9 per 32 for fp8_bf16.
inline void fp8_pair_bf16(const uint8_t* p, const Fp8Tables& t, __m512bh* u0, __m512bh* u1) {
  const __m512i c = _mm512_loadu_si512(p);
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, c, t.lo1);
  __m512i hi = _mm512_permutex2var_epi8(t.hi0, c, t.hi1);
  hi = _mm512_ternarylogic_epi32(hi, c, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  *u0 = (__m512bh)_mm512_unpacklo_epi8(lo, hi);
  *u1 = (__m512bh)_mm512_unpackhi_epi8(lo, hi);
}

// The 32 codes of block b of a column as bf16, element e = input 32b + e.
inline __m512bh codes_bf16(const uint8_t* col, int64_t b, int bits, bool fp8, __m512i table) {
  if (fp8) return fp8_bf16(col + b * 32);
  if (bits == 4) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(col + b * 16));
    const __m128i lo = _mm_and_si128(bytes, _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0F));
    const __m512i idx = _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo));
    return (__m512bh)_mm512_permutexvar_epi16(idx, table);
  }
  const uint8_t* p = col + b * 32;
  const __m512 lo = _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  const __m512 hi = _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
  return _mm512_cvtne2ps_pbh(hi, lo);
}

// Rows [i0, i0 + R) of output columns [j0, j0 + C). The codes come from each column,
// decoded block by block, or, when `decoded` is not null, from the C columns already decoded
// to bf16 (column c at decoded + c * k_pad). Several columns share each row's activation loads, and
// the two blocks of an fp8 pair accumulate apart: a single row then still has 2C independent
// vdpbf16ps chains instead of one (its latency, not the decode, bounded decode before).
template <int R, int C, bool kDecoded>
void tile(const QMatrixView& w, const Bf16ActsView& a, const float* bias, int64_t i0, int64_t j0,
          const uint16_t* decoded, __m512i table, const Fp8Tables& tables, float* y) {
  // Registers: R C totals and R C accumulators (2 R C from memory), C codes, one x.
  static_assert(kDecoded ? R * C <= 12 : R * C <= 4);
  const int64_t nb = w.blocks(), bpg = w.group_size / kQBlock;
  const int64_t block_bytes = w.bits * kQBlock / 8;
  const uint8_t* col[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c)
    col[c] = w.codes + static_cast<size_t>(j0 + c) * w.code_bytes_per_column();
  __m512 total[R][C];
  float zsum[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      total[r][c] = _mm512_setzero_ps();
      zsum[r][c] = 0.0f;
    }
  }
  for (int64_t g = 0; g < w.n_groups; ++g) {
    __m512 acc[R][C], acc2[R][C];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = acc2[r][c] = _mm512_setzero_ps();
    }
    const int64_t b_end = std::min(nb, (g + 1) * bpg);
    int64_t b = g * bpg;
    if (!kDecoded && w.fp8_pairs) {
      for (; b + 1 < b_end; b += 2) {
        __m512bh u0[C], u1[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          _mm_prefetch(reinterpret_cast<const char*>(col[c]) + b * 32 + kPrefetchBytes,
                       _MM_HINT_T1);
          fp8_pair_bf16(col[c] + b * 32, tables, &u0[c], &u1[c]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const uint16_t* xr = a.x + (i0 + r) * a.k_pad + b * kQBlock;
          const __m512bh x0 = (__m512bh)_mm512_loadu_si512(xr);
          const __m512bh x1 = (__m512bh)_mm512_loadu_si512(xr + kQBlock);
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            acc[r][c] = _mm512_dpbf16_ps(acc[r][c], u0[c], x0);
            acc2[r][c] = _mm512_dpbf16_ps(acc2[r][c], u1[c], x1);
          }
        }
      }
    }
    for (; b < b_end; ++b) {
      __m512bh u[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        if constexpr (kDecoded) {
          u[c] = (__m512bh)_mm512_loadu_si512(decoded + c * w.k_pad + b * kQBlock);
        } else {
          // A column is a few hundred bytes: too short a stream for the hardware prefetcher
          // (as in the int8 GEMV), so the codes 16 KiB ahead are asked for into L2.
          _mm_prefetch(reinterpret_cast<const char*>(col[c]) + b * block_bytes + kPrefetchBytes,
                       _MM_HINT_T1);
          u[c] = codes_bf16(col[c], b, w.bits, w.fp8, table);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(a.x + (i0 + r) * a.k_pad + b * kQBlock);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], u[c], xv);
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const size_t at = static_cast<size_t>((j0 + c) * w.n_groups + g);
      const float ws = w.fp8 ? w.scales[at] * 256.0f : w.scales[at];
      const float zt = w.zero_terms != nullptr ? w.zero_terms[at] : -w.scales[at] * w.uniform_zero;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const float gs = a.gscale != nullptr ? a.gscale[(i0 + r) * w.n_groups + g] : 1.0f;
        total[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(ws * gs), _mm512_add_ps(acc[r][c], acc2[r][c]),
                                      total[r][c]);
        zsum[r][c] += gs * zt * a.gsum[(i0 + r) * w.n_groups + g];
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      y[(i0 + r) * w.n + j0 + c] =
          _mm512_reduce_add_ps(total[r][c]) + zsum[r][c] + (bias != nullptr ? bias[j0 + c] : 0.0f);
    }
  }
}

// Decode-sized batches (m <= kRows): all rows at once, 4 / m columns at a time, every
// block's codes decoded once, straight from memory.
template <int R>
void decode_rows(const QMatrixView& w, const Bf16ActsView& a, const float* bias, int64_t n_begin,
                 int64_t n_end, __m512i table, const Fp8Tables& tables, float* y) {
  constexpr int C = R == 1 ? 4 : R == 2 ? 2 : 1;
  int64_t j = n_begin;
  for (; j + C <= n_end; j += C) tile<R, C, false>(w, a, bias, 0, j, nullptr, table, tables, y);
  for (; j < n_end; ++j) tile<R, 1, false>(w, a, bias, 0, j, nullptr, table, tables, y);
}

// round_to_e4m3 on 16 lanes, bit for bit: saturation at 448 (NaN kept), the subnormal
// quantum 2^-9 below 2^-6, and round-to-nearest-even of the mantissa to 3 bits above.
inline __m512 round_e4m3(__m512 v) {
  const __m512 a = _mm512_abs_ps(v);
  const __mmask16 big = _mm512_cmp_ps_mask(a, _mm512_set1_ps(448.0f), _CMP_NLT_UQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __mmask16 sub = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.015625f), _CMP_LT_OQ);
  const __m512 rs =
      _mm512_mul_ps(_mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(512.0f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                    _mm512_set1_ps(1.0f / 512.0f));
  __m512i u = _mm512_castps_si512(a);
  u = _mm512_add_epi32(
      u, _mm512_add_epi32(_mm512_set1_epi32(0x7ffff),
                          _mm512_and_si512(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(1))));
  u = _mm512_and_si512(u, _mm512_set1_epi32(~0xfffff));
  __m512 r = _mm512_mask_blend_ps(sub, _mm512_castsi512_ps(u), rs);
  r = _mm512_mask_blend_ps(big, r, _mm512_set1_ps(448.0f));
  r = _mm512_or_ps(r, _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));
  return _mm512_mask_blend_ps(nan, r, v);
}

// f32_to_bf16 on 16 lanes, bit for bit (vcvtneps2bf16 would flush subnormals).
inline __m256i to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                           _mm512_and_si512(hi, _mm512_set1_epi32(1)))),
      16);
  r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), hi, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

}  // namespace

bool bf16act_supported() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") &&
         __builtin_cpu_supports("avx512vbmi");
}

void qlinear_bf16act_avx512(const QMatrixView& w, const Bf16ActsView& a, const float* bias,
                            int64_t n_begin, int64_t n_end, float* y) {
  const __m512i table = code_table();
  static const Fp8Tables tables = fp8_tables();
  switch (a.m) {
    case 1:
      return decode_rows<1>(w, a, bias, n_begin, n_end, table, tables, y);
    case 2:
      return decode_rows<2>(w, a, bias, n_begin, n_end, table, tables, y);
    case 3:
      return decode_rows<3>(w, a, bias, n_begin, n_end, table, tables, y);
    case kRows:
      return decode_rows<kRows>(w, a, bias, n_begin, n_end, table, tables, y);
    default:
      break;
  }
  // Prefill-sized: kCols columns' codes are decoded to bf16 once (L1-resident: 2 bytes per
  // input each) and reused by every row tile, a 4 x 3 tile of independent vdpbf16ps chains
  // (one column against 4 rows was 4 chains: latency-bound; 4 x 4 would spill). The buffer only
  // grows, so a thread allocates once.
  constexpr int kCols = 3;
  thread_local std::vector<uint16_t> decoded;
  const int64_t nb = w.blocks();
  const size_t need = static_cast<size_t>(kCols * w.k_pad);
  if (decoded.size() < need) decoded.resize(need);
  auto decode_column = [&](int64_t j, uint16_t* out) {
    const uint8_t* col = w.codes + static_cast<size_t>(j) * w.code_bytes_per_column();
    int64_t b = 0;
    if (w.fp8_pairs) {
      for (; b + 1 < nb; b += 2) {
        __m512bh u0, u1;
        fp8_pair_bf16(col + b * 32, tables, &u0, &u1);
        _mm512_storeu_si512(out + b * kQBlock, (__m512i)u0);
        _mm512_storeu_si512(out + (b + 1) * kQBlock, (__m512i)u1);
      }
    }
    for (; b < nb; ++b) {
      _mm512_storeu_si512(out + b * kQBlock, (__m512i)codes_bf16(col, b, w.bits, w.fp8, table));
    }
  };
  int64_t j = n_begin;
  for (; j + kCols <= n_end; j += kCols) {
    for (int c = 0; c < kCols; ++c) decode_column(j + c, decoded.data() + c * w.k_pad);
    int64_t i = 0;
    for (; i + kRows <= a.m; i += kRows) {
      tile<kRows, kCols, true>(w, a, bias, i, j, decoded.data(), table, tables, y);
    }
    for (; i < a.m; ++i) tile<1, kCols, true>(w, a, bias, i, j, decoded.data(), table, tables, y);
  }
  for (; j < n_end; ++j) {
    decode_column(j, decoded.data());
    int64_t i = 0;
    for (; i + kRows <= a.m; i += kRows) {
      tile<kRows, 1, true>(w, a, bias, i, j, decoded.data(), table, tables, y);
    }
    for (; i < a.m; ++i) tile<1, 1, true>(w, a, bias, i, j, decoded.data(), table, tables, y);
  }
}

Bf16ActsView prepare_declared_bf16_acts_avx512(const QMatrixView& w, const ActQuant& act,
                                               float static_scale, int32_t static_zero,
                                               const float* x, int64_t m, void* buf) {
  // Act-order inputs are gathered: rare with W8A8, left to the scalar version.
  if (w.perm != nullptr) {
    return prepare_declared_bf16_acts(w, act, static_scale, static_zero, x, m, buf);
  }
  const DeclaredActsBuffers out = declared_bf16_acts_buffers(w, m, buf);
  const bool fp8 = act.type == ActQuant::kFp8;
  const int64_t span = declared_act_span(w, act);
  const bool aligned = declared_acts_aligned(w, act);
  auto mask = [](int64_t left) {
    return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
  };
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * w.k;
    uint16_t* row = out.x + r * w.k_pad;
    for (int64_t c0 = 0; c0 < w.k; c0 += span) {
      const int64_t c1 = std::min(w.k, c0 + span);
      float s = static_scale;
      int32_t z = static_zero;
      if (act.dynamic) {
        // Min and max are exact in any order, so these equal the scalar loop's; x goes first
        // so that a NaN input is skipped as std::min / std::max skip it.
        __m512 lo = _mm512_setzero_ps(), hi = lo, amax = lo;
        for (int64_t c = c0; c < c1; c += 16) {
          const __m512 v = _mm512_maskz_loadu_ps(mask(c1 - c), xr + c);
          lo = _mm512_min_ps(v, lo);
          hi = _mm512_max_ps(v, hi);
          amax = _mm512_max_ps(_mm512_abs_ps(v), amax);
        }
        declared_act_scale(act, _mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi),
                           _mm512_reduce_max_ps(amax), &s, &z);
      }
      const __m512 sv = _mm512_set1_ps(s), zf = _mm512_set1_ps(static_cast<float>(z));
      for (int64_t c = c0; c < c1; c += 16) {
        const __mmask16 mk = mask(c1 - c);
        __m512 v = _mm512_setzero_ps();
        if (s > 0.0f) {
          const __m512 q = _mm512_div_ps(_mm512_maskz_loadu_ps(mk, xr + c), sv);
          if (fp8) {
            v = round_e4m3(q);
          } else {
            const __m512 t = _mm512_add_ps(
                _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zf);
            // Bounds first: a NaN passes through, as through std::clamp.
            v = _mm512_sub_ps(
                _mm512_min_ps(_mm512_set1_ps(127.0f), _mm512_max_ps(_mm512_set1_ps(-128.0f), t)),
                zf);
          }
        }
        if (!aligned) v = _mm512_mul_ps(sv, v);
        _mm256_mask_storeu_epi16(row + c, mk, to_bf16(v));
      }
      if (aligned) {
        for (int64_t g = c0 / w.group_size; g < w.n_groups && g * w.group_size < c1; ++g) {
          out.gscale[r * w.n_groups + g] = s;
        }
      }
    }
    std::fill(row + w.k, row + w.k_pad, uint16_t{0});
    if (!aligned) std::fill_n(out.gscale + r * w.n_groups, w.n_groups, 1.0f);
    declared_bf16_group_sums(w, row, out.gsum + r * w.n_groups);
  }
  Bf16ActsView v{m, w.k_pad, w.n_groups, out.x, out.gsum};
  v.gscale = out.gscale;
  return v;
}

}  // namespace qs::kernels::cpu
