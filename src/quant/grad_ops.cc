// quant: forward and hand-written backward of the decoder block's operations (grad_ops.h).
#include "quant/grad_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "ops/causal_attention.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/linear.h"

namespace qs::quant {

template <>
void matmul<float>(const MatMul<float>& g, ThreadPool* pool) {
  const kernels::GemmArgs args{g.a,   g.a_rs, g.a_cs, g.b, g.ldb,       g.c,
                               g.ldc, g.m,    g.n,    g.k, g.accumulate};
  const Status st = ops::gemm(args, pool, g.products);
  QS_CHECK_MSG(st.ok(), st.message().c_str());
}

template <>
void matmul<double>(const MatMul<double>& g, ThreadPool*) {
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < g.k; ++p) acc += g.a[i * g.a_rs + p * g.a_cs] * g.b[p * g.ldb + j];
      double& c = g.c[i * g.ldc + j];
      c = g.accumulate ? c + acc : acc;
    }
  }
}

template <>
void linear_forward<float>(const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                           const float* bias, float* y, ThreadPool& pool, ops::Products products) {
  if (products == ops::Products::kBf16) {
    // y = bias + x W^T, B(p, j) = w[j k + p]: the bf16 GEMM packs W^T through its strides.
    if (bias != nullptr) {
      for (int64_t i = 0; i < m; ++i) std::copy_n(bias, n, y + i * n);
    }
    kernels::GemmArgs args = ops::gemm_args(x, false, w, y, m, n, k, bias != nullptr);
    args.ldb = 1;
    args.b_col_stride = k;
    const Status st = ops::gemm(args, &pool, products);
    QS_CHECK_MSG(st.ok(), st.message().c_str());
    return;
  }
  Tensor view;  // borrowed: the owned f32 buffer of a quantized-dequantized weight
  view.dtype = DType::kF32;
  view.shape = {n, k};
  view.data = const_cast<float*>(w);
  const Status st = ops::linear(x, m, view, bias, y, pool);
  QS_CHECK_MSG(st.ok(), st.message().c_str());
}

template <>
void linear_forward<double>(const double* x, int64_t m, int64_t k, const double* w, int64_t n,
                            const double* bias, double* y, ThreadPool&, ops::Products) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias != nullptr ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += x[i * k + p] * w[j * k + p];
      y[i * n + j] = acc;
    }
  }
}

template <class T>
void linear_backward(const T* x, const T* dy, int64_t m, int64_t k, const T* w, int64_t n, T* dx,
                     T* dw, bool accumulate, ThreadPool& pool, ops::Products products) {
  // dX[m, k] = dY[m, n] * W[n, k]
  if (dx != nullptr) matmul<T>({dy, n, 1, w, k, dx, k, m, k, n, accumulate, products}, &pool);
  // dW[n, k] = dY^T[n, m] * X[m, k]: A(i, p) = dy[p * n + i]
  if (dw != nullptr) matmul<T>({dy, 1, n, x, k, dw, k, n, k, m, accumulate, products}, &pool);
}

template <class T>
void rms_norm_forward(const T* x, int64_t m, int64_t d, const T* weight, double eps, T* y,
                      T* inv_rms) {
  for (int64_t i = 0; i < m; ++i) {
    const T* xi = x + i * d;
    T ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += xi[j] * xi[j];
    const T r = T(1) / std::sqrt(ss / static_cast<T>(d) + static_cast<T>(eps));
    inv_rms[i] = r;
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = xi[j] * r * weight[j];
  }
}

template <class T>
void rms_norm_backward(const T* x, const T* inv_rms, const T* dy, int64_t m, int64_t d,
                       const T* weight, T* dx, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    const T* xi = x + i * d;
    const T* gi = dy + i * d;
    const T r = inv_rms[i];
    T dot = 0;  // sum_j w_j dy_j x_j
    for (int64_t j = 0; j < d; ++j) dot += weight[j] * gi[j] * xi[j];
    const T c = r * r * r * dot / static_cast<T>(d);
    for (int64_t j = 0; j < d; ++j) {
      const T g = r * weight[j] * gi[j] - c * xi[j];
      dx[i * d + j] = accumulate ? dx[i * d + j] + g : g;
    }
  }
}

template <class T>
void rope_forward(T* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const T* cos,
                  const T* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      T* v = x + (t * n_heads + h) * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const T c = cos[t * half + j], s = sin[t * half + j];
        const T x1 = v[j], x2 = v[j + half];
        v[j] = x1 * c - x2 * s;
        v[j + half] = x2 * c + x1 * s;
      }
    }
  }
}

template <class T>
void rope_backward(T* dx, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const T* cos,
                   const T* sin) {
  // The rotation's transpose: (g1 cos + g2 sin, g2 cos - g1 sin).
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      T* g = dx + (t * n_heads + h) * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const T c = cos[t * half + j], s = sin[t * half + j];
        const T g1 = g[j], g2 = g[j + half];
        g[j] = g1 * c + g2 * s;
        g[j + half] = g2 * c - g1 * s;
      }
    }
  }
}

template <class T>
void silu_mul_forward(const T* gate, const T* up, int64_t n, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    ops::silu_mul(gate, up, n, out);  // the vector exp of ops (a few ulp of std::exp)
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (T(1) + std::exp(-gate[i])) * up[i];
  }
}

template <class T>
void silu_mul_backward(const T* gate, const T* up, const T* dout, int64_t n, T* dgate, T* dup) {
  for (int64_t i = 0; i < n; ++i) {
    const T sig = T(1) / (T(1) + std::exp(-gate[i]));
    dup[i] = dout[i] * gate[i] * sig;
    // d silu(g)/dg = sig * (1 + g * (1 - sig))
    dgate[i] = dout[i] * up[i] * sig * (T(1) + gate[i] * (T(1) - sig));
  }
}

namespace {

bool allowed(const AttentionShape& s, const uint8_t* mask_row, int64_t i, int64_t j) {
  if (j > i) return false;
  if (mask_row != nullptr && mask_row[j] == 0) return false;
  return s.sliding_window == 0 || j > i - s.sliding_window;
}

// Queries are processed in blocks of this many rows; a block's keys stop at its last query
// (causality), so the masked upper triangle is never computed and the probabilities of one
// block, [kRowBlock, seqlen], are all that is held.
constexpr int64_t kRowBlock = 64;

// Per-thread work buffers, reused across calls.
template <class T>
struct AttnScratch {
  std::vector<T> p;       // [kRowBlock, seqlen] probabilities of one query block
  std::vector<T> dp;      // [kRowBlock, seqlen] their gradient
  std::vector<T> kt, vt;  // [head_dim, seqlen]: K^T and V^T of the kv head
};

template <class T>
AttnScratch<T>& scratch(int64_t seqlen, int64_t head_dim) {
  thread_local AttnScratch<T> s;
  s.p.resize(kRowBlock * seqlen);
  s.dp.resize(kRowBlock * seqlen);
  s.kt.resize(head_dim * seqlen);
  s.vt.resize(head_dim * seqlen);
  return s;
}

// Copies the [seqlen, head_dim] slice (row stride ld) of x transposed into out [head_dim, seqlen].
template <class T>
void transpose_head(const T* x, int64_t ld, int64_t seqlen, int64_t head_dim, T* out) {
  for (int64_t t = 0; t < seqlen; ++t)
    for (int64_t d = 0; d < head_dim; ++d) out[d * seqlen + t] = x[t * ld + d];
}

// exp(row[j] - shift) over n scores (-inf ones give 0; at most 2^-126 on AVX2), written back when
// `write`; returns their sum. f32 takes the vector exp of ops (a few ulp of std::exp; the forward
// and the backward both call it, so they still see the same P); f64, the oracle of the gradient
// tests, stays with std::exp.
float exp_row(float* row, int64_t n, float shift, bool write) {
  return ops::exp_sub(row, n, shift, write ? row : nullptr);
}
double exp_row(double* row, int64_t n, double shift, bool write) {
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double e = std::exp(row[j] - shift);
    if (write) row[j] = e;
    sum += e;
  }
  return sum;
}

// Rows [i0, i1) of P = softmax(scale * Q_h K^T) over keys [0, i1), into p ([i1 - i0, seqlen],
// row stride seqlen), where kt holds K^T times `kt_scale` (the forward scales K^T once per
// head instead of every score; the backward passes 1). The backward passes the forward's
// log-sum-exps as lse_in and gets P itself. The forward gets lse_out and, in p, the
// unnormalised exp(scores - row max), whose 1 / sum goes to inv_out[i - i0]: it normalises the
// row's output (P V, head_dim wide) instead of the row (up to seqlen wide); exp(scores - lse)
// is the same P to a few ulp. A row with no allowed key is zero.
template <class T>
void probabilities(const AttentionShape& s, const T* qh, int64_t q_ld, const T* kt, T kt_scale,
                   const uint8_t* mask_row, int64_t i0, int64_t i1, T* p, T* lse_out, T* inv_out,
                   const T* lse_in) {
  const int64_t n = s.seqlen, cols = i1;
  matmul<T>({qh + i0 * q_ld, q_ld, 1, kt, n, p, n, i1 - i0, cols, s.head_dim, false, s.products},
            nullptr);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const T scale = static_cast<T>(s.scale) / kt_scale;  // what the scores still need
  for (int64_t i = i0; i < i1; ++i) {
    T* row = p + (i - i0) * n;
    T mx = kNegInf;
    int64_t live = cols;  // the columns the exponentials see; any past them are 0
    if (mask_row == nullptr && s.sliding_window == 0) {
      // Plain causal rows (the calibration's): keys 0..i, branch-free, eight running maxima
      // (max is exact, so their maximum is the one a single pass finds).
      live = i + 1;
      if (scale != T(1)) {
        for (int64_t j = 0; j < live; ++j) row[j] *= scale;
      }
      T m8[8] = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
      int64_t j = 0;
      for (; j + 8 <= live; j += 8) {
        // As x86 max: SLP turns the eight into packed maxps at -O2 (std::max does not).
        for (int t = 0; t < 8; ++t) m8[t] = row[j + t] > m8[t] ? row[j + t] : m8[t];
      }
      for (; j < live; ++j) m8[0] = std::max(m8[0], row[j]);
      mx = *std::max_element(m8, m8 + 8);
      std::fill(row + live, row + cols, T(0));
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        if (allowed(s, mask_row, i, j)) {
          row[j] *= scale;
          mx = std::max(mx, row[j]);
        } else {
          row[j] = kNegInf;  // exp gives 0 below
        }
      }
    }
    if (mx == kNegInf) {  // no key: output zeros
      std::fill_n(row, cols, T(0));
      if (lse_out != nullptr) lse_out[i] = 0;
      if (inv_out != nullptr) inv_out[i - i0] = 0;
      continue;
    }
    if (lse_in != nullptr) {
      exp_row(row, live, lse_in[i], true);
      continue;
    }
    // sum >= 1 (the maximum contributes exp(0)); the max() only tells static analysers so.
    const T sum = std::max(exp_row(row, live, mx, true), T(1));
    lse_out[i] = mx + std::log(sum);
    inv_out[i - i0] = T(1) / sum;
  }
}

}  // namespace

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v,
                       const uint8_t* mask, T* out, T* lse, ThreadPool& pool) {
  if constexpr (std::is_same_v<T, float>) {
    // Plain causal with bf16 products, i.e. every calibration forward: the fused kernel, which
    // converts K and V once per kv head and keeps the scores in L1.
    if (s.fused_bf16 && s.products == ops::Products::kBf16 && mask == nullptr &&
        s.sliding_window == 0 && ops::causal_attention_bf16_runs(s.head_dim)) {
      const ops::CausalAttentionShape cs{s.n_seqs,     s.seqlen,   s.n_heads,
                                         s.n_kv_heads, s.head_dim, static_cast<float>(s.scale)};
      const Status st = ops::causal_attention_bf16(cs, q, k, v, out, lse, pool);
      QS_CHECK_MSG(st.ok(), st.message().c_str());
      return;
    }
  }
  const int64_t n = s.seqlen, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t q_dim = s.n_heads * hd, kv_dim = s.n_kv_heads * hd;
  pool.parallel_for(s.n_seqs * s.n_kv_heads, [&](int64_t begin, int64_t end) {
    AttnScratch<T>& sc = scratch<T>(n, hd);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / s.n_kv_heads, g = task % s.n_kv_heads;
      const uint8_t* mask_row = mask != nullptr ? mask + b * n : nullptr;
      const T* vg = v + b * n * kv_dim + g * hd;
      transpose_head(k + b * n * kv_dim + g * hd, kv_dim, n, hd, sc.kt.data());
      const auto kt_scale = static_cast<T>(s.scale);
      for (T& e : sc.kt) e *= kt_scale;
      T inv[kRowBlock];
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const T* qh = q + b * n * q_dim + h * hd;
        T* oh = out + b * n * q_dim + h * hd;
        T* lse_h = lse + (b * s.n_heads + h) * n;
        for (int64_t i0 = 0; i0 < n; i0 += kRowBlock) {
          const int64_t i1 = std::min(n, i0 + kRowBlock);
          probabilities<T>(s, qh, q_dim, sc.kt.data(), kt_scale, mask_row, i0, i1, sc.p.data(),
                           lse_h, inv, nullptr);
          // O_h[i0:i1] = P[i0:i1, :i1] V_g[:i1], each row normalised after the product
          matmul<T>({sc.p.data(), n, 1, vg, kv_dim, oh + i0 * q_dim, q_dim, i1 - i0, hd, i1, false,
                     s.products},
                    nullptr);
          for (int64_t i = i0; i < i1; ++i) {
            T* o = oh + i * q_dim;
            for (int64_t d = 0; d < hd; ++d) o[d] *= inv[i - i0];
          }
        }
      }
    }
  });
}

template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v,
                        const uint8_t* mask, const T* out, const T* lse, const T* dout, T* dq,
                        T* dk, T* dv, ThreadPool& pool) {
  const int64_t n = s.seqlen, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t q_dim = s.n_heads * hd, kv_dim = s.n_kv_heads * hd;
  // Each task owns one kv head of one sequence, so the group's heads accumulate into dk/dv
  // without races.
  pool.parallel_for(s.n_seqs * s.n_kv_heads, [&](int64_t begin, int64_t end) {
    AttnScratch<T>& sc = scratch<T>(n, hd);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / s.n_kv_heads, g = task % s.n_kv_heads;
      const uint8_t* mask_row = mask != nullptr ? mask + b * n : nullptr;
      const T* kg = k + b * n * kv_dim + g * hd;
      const T* vg = v + b * n * kv_dim + g * hd;
      T* dkg = dk + b * n * kv_dim + g * hd;
      T* dvg = dv + b * n * kv_dim + g * hd;
      for (int64_t t = 0; t < n; ++t) {
        std::fill_n(dkg + t * kv_dim, hd, T(0));
        std::fill_n(dvg + t * kv_dim, hd, T(0));
      }
      transpose_head(kg, kv_dim, n, hd, sc.kt.data());
      transpose_head(vg, kv_dim, n, hd, sc.vt.data());
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const T* qh = q + b * n * q_dim + h * hd;
        const T* oh = out + b * n * q_dim + h * hd;
        const T* doh = dout + b * n * q_dim + h * hd;
        T* dqh = dq + b * n * q_dim + h * hd;
        for (int64_t i0 = 0; i0 < n; i0 += kRowBlock) {
          const int64_t i1 = std::min(n, i0 + kRowBlock), rows = i1 - i0;
          T* p = sc.p.data();
          T* dp = sc.dp.data();
          probabilities<T>(s, qh, q_dim, sc.kt.data(), T(1), mask_row, i0, i1, p, nullptr, nullptr,
                           lse + (b * s.n_heads + h) * n);
          // dV_g[:i1] += P^T dO_h[i0:i1]
          matmul<T>({p, 1, n, doh + i0 * q_dim, q_dim, dvg, kv_dim, i1, hd, rows, true, s.products},
                    nullptr);
          // dP = dO_h[i0:i1] V_g[:i1]^T
          matmul<T>(
              {doh + i0 * q_dim, q_dim, 1, sc.vt.data(), n, dp, n, rows, i1, hd, false, s.products},
              nullptr);
          // dS = P * (dP - rowsum(dO * O)) * scale (softmax backward; rowsum(P dP) = dO . O)
          for (int64_t i = i0; i < i1; ++i) {
            T d = 0;
            for (int64_t c = 0; c < hd; ++c) d += doh[i * q_dim + c] * oh[i * q_dim + c];
            T* dpr = dp + (i - i0) * n;
            const T* pr = p + (i - i0) * n;
            for (int64_t j = 0; j < i1; ++j)
              dpr[j] = pr[j] * (dpr[j] - d) * static_cast<T>(s.scale);
          }
          // dQ_h[i0:i1] = dS K_g[:i1]; dK_g[:i1] += dS^T Q_h[i0:i1]
          matmul<T>(
              {dp, n, 1, kg, kv_dim, dqh + i0 * q_dim, q_dim, rows, hd, i1, false, s.products},
              nullptr);
          matmul<T>({dp, 1, n, qh + i0 * q_dim, q_dim, dkg, kv_dim, i1, hd, rows, true, s.products},
                    nullptr);
        }
      }
    }
  });
}

#define QS_INSTANTIATE(T)                                                                          \
  template void linear_backward<T>(const T*, const T*, int64_t, int64_t, const T*, int64_t, T*,    \
                                   T*, bool, ThreadPool&, ops::Products);                          \
  template void rms_norm_forward<T>(const T*, int64_t, int64_t, const T*, double, T*, T*);         \
  template void rms_norm_backward<T>(const T*, const T*, const T*, int64_t, int64_t, const T*, T*, \
                                     bool);                                                        \
  template void rope_forward<T>(T*, int64_t, int64_t, int64_t, const T*, const T*);                \
  template void rope_backward<T>(T*, int64_t, int64_t, int64_t, const T*, const T*);               \
  template void silu_mul_forward<T>(const T*, const T*, int64_t, T*);                              \
  template void silu_mul_backward<T>(const T*, const T*, const T*, int64_t, T*, T*);               \
  template void attention_forward<T>(const AttentionShape&, const T*, const T*, const T*,          \
                                     const uint8_t*, T*, T*, ThreadPool&);                         \
  template void attention_backward<T>(const AttentionShape&, const T*, const T*, const T*,         \
                                      const uint8_t*, const T*, const T*, const T*, T*, T*, T*,    \
                                      ThreadPool&);
QS_INSTANTIATE(float)
QS_INSTANTIATE(double)
#undef QS_INSTANTIATE

}  // namespace qs::quant
