// quant: the Wan block's forward and hand-written backward (wan_block.h).
#include "quant/wan_block.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "quant/grad_ops.h"

namespace qs::quant {

namespace {

// torch's tanh-approximated GELU: sqrt(2 / pi) and 0.044715.
constexpr double kGeluC = 0.7978845608028654, kGeluA = 0.044715;

template <class T>
const T* bias_or_null(const std::vector<T>& b) {
  return b.empty() ? nullptr : b.data();
}

// FP32LayerNorm without affine: xhat = (x - mean) / sqrt(var + eps), inv = 1 / sqrt(var + eps).
template <class T>
void layer_norm_forward(const T* x, int64_t m, int64_t d, double eps, T* xhat, T* inv) {
  for (int64_t i = 0; i < m; ++i) {
    const T* xi = x + i * d;
    T mean = 0;
    for (int64_t j = 0; j < d; ++j) mean += xi[j];
    mean /= static_cast<T>(d);
    T var = 0;
    for (int64_t j = 0; j < d; ++j) var += (xi[j] - mean) * (xi[j] - mean);
    var /= static_cast<T>(d);
    const T r = T(1) / std::sqrt(var + static_cast<T>(eps));
    inv[i] = r;
    for (int64_t j = 0; j < d; ++j) xhat[i * d + j] = (xi[j] - mean) * r;
  }
}

// dx += inv * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
template <class T>
void layer_norm_backward(const T* xhat, const T* inv, const T* dxhat, int64_t m, int64_t d, T* dx) {
  for (int64_t i = 0; i < m; ++i) {
    const T* xh = xhat + i * d;
    const T* g = dxhat + i * d;
    T sg = 0, sgx = 0;
    for (int64_t j = 0; j < d; ++j) {
      sg += g[j];
      sgx += g[j] * xh[j];
    }
    sg /= static_cast<T>(d);
    sgx /= static_cast<T>(d);
    for (int64_t j = 0; j < d; ++j) dx[i * d + j] += inv[i] * (g[j] - sg - xh[j] * sgx);
  }
}

// The modulation row of token r: one row for the sample, or one per token.
template <class T>
const T* mod_row(const std::vector<T>& mod, const WanConditioning<T>& c, int64_t r, int64_t dim) {
  return mod.data() + (c.n_mod == 1 ? 0 : r) * 6 * dim;
}

// Interleaved-pair rotation (ops::rope_interleaved) by +angle (forward) or -angle (backward:
// the transpose of a rotation).
template <class T>
void rope_interleaved(T* x, int64_t n, int64_t n_heads, int64_t head_dim, const T* cos,
                      const T* sin, bool inverse) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      T* xh = x + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const T c = cos[t * half + i], s = inverse ? -sin[t * half + i] : sin[t * half + i];
        const T x0 = xh[2 * i], x1 = xh[2 * i + 1];
        xh[2 * i] = x0 * c - x1 * s;
        xh[2 * i + 1] = x1 * c + x0 * s;
      }
    }
  }
}

// Full (non-causal) multi-head attention, q [nq, dim], k, v [nk, dim] (heads side by side):
// out [nq, dim], lse [n_heads, nq] the log-sum-exp of each query's scaled scores, which the
// backward uses to recompute the probabilities rather than storing nq x nk per head.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t nq, int64_t nk, int64_t n_heads,
                       int64_t hd, T* out, T* lse, ThreadPool& pool) {
  const int64_t dim = n_heads * hd;
  const T scale = T(1) / std::sqrt(static_cast<T>(hd));
  pool.parallel_for(n_heads, [&](int64_t h0, int64_t h1) {
    std::vector<T> s(nk);
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t i = 0; i < nq; ++i) {
        const T* qi = q + i * dim + h * hd;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < nk; ++j) {
          const T* kj = k + j * dim + h * hd;
          T dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += qi[e] * kj[e];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        T z = 0;
        for (int64_t j = 0; j < nk; ++j) z += (s[j] = std::exp(s[j] - mx));
        T* oi = out + i * dim + h * hd;
        std::fill(oi, oi + hd, T(0));
        for (int64_t j = 0; j < nk; ++j) {
          const T p = s[j] / z;
          const T* vj = v + j * dim + h * hd;
          for (int64_t e = 0; e < hd; ++e) oi[e] += p * vj[e];
        }
        lse[h * nq + i] = mx + std::log(z);
      }
    }
  });
}

// dq, dk, dv (overwritten) from dout: p = exp(s - lse), dv += p dout, ds = p (dout.v - dout.out),
// dq += scale ds k, dk += scale ds q. Heads are independent, so threads split them.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* dout, int64_t nq, int64_t nk, int64_t n_heads, int64_t hd, T* dq,
                        T* dk, T* dv, ThreadPool& pool) {
  const int64_t dim = n_heads * hd;
  const T scale = T(1) / std::sqrt(static_cast<T>(hd));
  std::fill(dq, dq + nq * dim, T(0));
  std::fill(dk, dk + nk * dim, T(0));
  std::fill(dv, dv + nk * dim, T(0));
  pool.parallel_for(n_heads, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t i = 0; i < nq; ++i) {
        const T* qi = q + i * dim + h * hd;
        const T* gi = dout + i * dim + h * hd;
        const T* oi = out + i * dim + h * hd;
        T* dqi = dq + i * dim + h * hd;
        T di = 0;
        for (int64_t e = 0; e < hd; ++e) di += gi[e] * oi[e];
        for (int64_t j = 0; j < nk; ++j) {
          const T* kj = k + j * dim + h * hd;
          const T* vj = v + j * dim + h * hd;
          T dot = 0, dp = 0;
          for (int64_t e = 0; e < hd; ++e) {
            dot += qi[e] * kj[e];
            dp += gi[e] * vj[e];
          }
          const T p = std::exp(dot * scale - lse[h * nq + i]);
          const T ds = p * (dp - di) * scale;
          T* dkj = dk + j * dim + h * hd;
          T* dvj = dv + j * dim + h * hd;
          for (int64_t e = 0; e < hd; ++e) {
            dvj[e] += p * gi[e];
            dqi[e] += ds * kj[e];
            dkj[e] += ds * qi[e];
          }
        }
      }
    }
  });
}

}  // namespace

const char* wan_linear_name(int i) {
  static const char* const kNames[kWanLinears] = {
      "attn1.to_q", "attn1.to_k", "attn1.to_v",     "attn1.to_out.0", "attn2.to_q",
      "attn2.to_k", "attn2.to_v", "attn2.to_out.0", "ffn.net.0.proj", "ffn.net.2"};
  return i >= 0 && i < kWanLinears ? kNames[i] : "";
}

template <class T>
void wan_block_forward(const WanBlockTensors<T>& b, const PerLinear<const T*>& w,
                       const WanConditioning<T>& c, const T* x, WanBlockActivations<T>* a, T* y,
                       ThreadPool& pool) {
  const int64_t S = c.seq, L = c.n_text, d = b.dim, F = b.ffn_dim, H = b.n_heads, hd = b.head_dim;
  const auto sd = static_cast<size_t>(S * d), ld = static_cast<size_t>(L * d);
  a->mod.resize(static_cast<size_t>(c.n_mod * 6 * d));
  for (int64_t u = 0; u < c.n_mod; ++u) {
    for (int64_t j = 0; j < 6 * d; ++j) {
      a->mod[u * 6 * d + j] = b.scale_shift_table[j] + c.timestep_proj[u * 6 * d + j];
    }
  }
  // Self-attention on norm1(x) * (1 + scale_msa) + shift_msa.
  a->xhat1.resize(sd);
  a->inv1.resize(S);
  a->nx.resize(sd);
  layer_norm_forward(x, S, d, b.eps, a->xhat1.data(), a->inv1.data());
  for (int64_t r = 0; r < S; ++r) {
    const T* m = mod_row(a->mod, c, r, d);
    for (int64_t j = 0; j < d; ++j) {
      a->nx[r * d + j] = a->xhat1[r * d + j] * (T(1) + m[d + j]) + m[j];
    }
  }
  for (auto* v : {&a->q_pre, &a->k_pre, &a->q, &a->k, &a->v, &a->att, &a->o}) v->resize(sd);
  a->inv_q.resize(S);
  a->inv_k.resize(S);
  a->lse.resize(static_cast<size_t>(H * S));
  linear_forward<T>(a->nx.data(), S, d, w[kWanQ], d, bias_or_null(b.bias[kWanQ]), a->q_pre.data(),
                    pool);
  linear_forward<T>(a->nx.data(), S, d, w[kWanK], d, bias_or_null(b.bias[kWanK]), a->k_pre.data(),
                    pool);
  linear_forward<T>(a->nx.data(), S, d, w[kWanV], d, bias_or_null(b.bias[kWanV]), a->v.data(),
                    pool);
  rms_norm_forward<T>(a->q_pre.data(), S, d, b.norm_q.data(), b.eps, a->q.data(), a->inv_q.data());
  rms_norm_forward<T>(a->k_pre.data(), S, d, b.norm_k.data(), b.eps, a->k.data(), a->inv_k.data());
  rope_interleaved(a->q.data(), S, H, hd, c.cos, c.sin, false);
  rope_interleaved(a->k.data(), S, H, hd, c.cos, c.sin, false);
  attention_forward(a->q.data(), a->k.data(), a->v.data(), S, S, H, hd, a->att.data(),
                    a->lse.data(), pool);
  linear_forward<T>(a->att.data(), S, d, w[kWanOut], d, bias_or_null(b.bias[kWanOut]), a->o.data(),
                    pool);
  a->x2.resize(sd);
  for (int64_t r = 0; r < S; ++r) {
    const T* m = mod_row(a->mod, c, r, d);
    for (int64_t j = 0; j < d; ++j)
      a->x2[r * d + j] = x[r * d + j] + m[2 * d + j] * a->o[r * d + j];
  }
  // Cross-attention to the text after norm2 (LayerNorm with affine), plain residual.
  a->n2.resize(sd);
  if (b.cross_attn_norm) {
    a->xhat2.resize(sd);
    a->inv2.resize(S);
    layer_norm_forward(a->x2.data(), S, d, b.eps, a->xhat2.data(), a->inv2.data());
    for (int64_t r = 0; r < S; ++r) {
      for (int64_t j = 0; j < d; ++j) {
        a->n2[r * d + j] = a->xhat2[r * d + j] * b.norm2_w[j] + b.norm2_b[j];
      }
    }
  } else {
    a->n2 = a->x2;
  }
  for (auto* v : {&a->q2_pre, &a->q2, &a->att2}) v->resize(sd);
  for (auto* v : {&a->k2_pre, &a->k2, &a->v2}) v->resize(ld);
  a->inv_q2.resize(S);
  a->inv_k2.resize(L);
  a->lse2.resize(static_cast<size_t>(H * S));
  linear_forward<T>(a->n2.data(), S, d, w[kWanQ2], d, bias_or_null(b.bias[kWanQ2]),
                    a->q2_pre.data(), pool);
  linear_forward<T>(c.text, L, d, w[kWanK2], d, bias_or_null(b.bias[kWanK2]), a->k2_pre.data(),
                    pool);
  linear_forward<T>(c.text, L, d, w[kWanV2], d, bias_or_null(b.bias[kWanV2]), a->v2.data(), pool);
  rms_norm_forward<T>(a->q2_pre.data(), S, d, b.norm_q2.data(), b.eps, a->q2.data(),
                      a->inv_q2.data());
  rms_norm_forward<T>(a->k2_pre.data(), L, d, b.norm_k2.data(), b.eps, a->k2.data(),
                      a->inv_k2.data());
  attention_forward(a->q2.data(), a->k2.data(), a->v2.data(), S, L, H, hd, a->att2.data(),
                    a->lse2.data(), pool);
  a->x3.resize(sd);
  linear_forward<T>(a->att2.data(), S, d, w[kWanOut2], d, bias_or_null(b.bias[kWanOut2]),
                    a->x3.data(), pool);
  for (size_t e = 0; e < sd; ++e) a->x3[e] += a->x2[e];
  // Feed-forward on norm3(x3) * (1 + c_scale) + c_shift, gated.
  a->xhat3.resize(sd);
  a->inv3.resize(S);
  a->n3.resize(sd);
  layer_norm_forward(a->x3.data(), S, d, b.eps, a->xhat3.data(), a->inv3.data());
  for (int64_t r = 0; r < S; ++r) {
    const T* m = mod_row(a->mod, c, r, d);
    for (int64_t j = 0; j < d; ++j) {
      a->n3[r * d + j] = a->xhat3[r * d + j] * (T(1) + m[4 * d + j]) + m[3 * d + j];
    }
  }
  a->h.resize(static_cast<size_t>(S * F));
  a->g.resize(static_cast<size_t>(S * F));
  a->f.resize(sd);
  linear_forward<T>(a->n3.data(), S, d, w[kWanFfnIn], F, bias_or_null(b.bias[kWanFfnIn]),
                    a->h.data(), pool);
  for (size_t e = 0; e < a->h.size(); ++e) {
    const T v = a->h[e];
    a->g[e] = T(0.5) * v * (T(1) + std::tanh(T(kGeluC) * (v + T(kGeluA) * v * v * v)));
  }
  linear_forward<T>(a->g.data(), S, F, w[kWanFfnOut], d, bias_or_null(b.bias[kWanFfnOut]),
                    a->f.data(), pool);
  for (int64_t r = 0; r < S; ++r) {
    const T* m = mod_row(a->mod, c, r, d);
    for (int64_t j = 0; j < d; ++j) {
      y[r * d + j] = a->x3[r * d + j] + m[5 * d + j] * a->f[r * d + j];
    }
  }
}

template <class T>
void wan_block_backward(const WanBlockTensors<T>& b, const PerLinear<const T*>& w,
                        const WanConditioning<T>& c, const WanBlockActivations<T>& a, const T* dy,
                        T* dx_out, const PerLinear<T*>& dw, ThreadPool& pool) {
  const int64_t S = c.seq, L = c.n_text, d = b.dim, F = b.ffn_dim, H = b.n_heads, hd = b.head_dim;
  const auto sd = static_cast<size_t>(S * d), ld = static_cast<size_t>(L * d);
  // Every buffer is cleared and accumulated into: linear_backward adds into dx and dw alike,
  // and dw sums over the samples of a step.
  std::vector<T> dx3(dy, dy + sd), tmp(sd), dh(static_cast<size_t>(S * F), T(0));
  // y = x3 + c_gate * f.
  for (int64_t r = 0; r < S; ++r) {
    const T* m = mod_row(a.mod, c, r, d);
    for (int64_t j = 0; j < d; ++j) tmp[r * d + j] = m[5 * d + j] * dy[r * d + j];
  }
  linear_backward<T>(a.g.data(), tmp.data(), S, F, w[kWanFfnOut], d, dh.data(), dw[kWanFfnOut],
                     true, pool);
  for (size_t e = 0; e < dh.size(); ++e) {
    const T v = a.h[e];
    const T th = std::tanh(T(kGeluC) * (v + T(kGeluA) * v * v * v));
    const T du = T(kGeluC) * (T(1) + T(3 * kGeluA) * v * v);
    dh[e] *= T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du;
  }
  std::vector<T> dn(sd, T(0));
  linear_backward<T>(a.n3.data(), dh.data(), S, d, w[kWanFfnIn], F, dn.data(), dw[kWanFfnIn], true,
                     pool);
  for (int64_t r = 0; r < S; ++r) {
    const T* m = mod_row(a.mod, c, r, d);
    for (int64_t j = 0; j < d; ++j) dn[r * d + j] *= T(1) + m[4 * d + j];
  }
  layer_norm_backward(a.xhat3.data(), a.inv3.data(), dn.data(), S, d, dx3.data());
  // x3 = x2 + to_out2(att2): dx2 = dx3.
  std::vector<T> datt(sd, T(0)), dq(sd), dk(sd), dv(sd), dk2(ld), dv2(ld), dpre(ld, T(0));
  linear_backward<T>(a.att2.data(), dx3.data(), S, d, w[kWanOut2], d, datt.data(), dw[kWanOut2],
                     true, pool);
  attention_backward(a.q2.data(), a.k2.data(), a.v2.data(), a.att2.data(), a.lse2.data(),
                     datt.data(), S, L, H, hd, dq.data(), dk2.data(), dv2.data(), pool);
  // k2 and v2 are functions of the fixed text only: their weights' gradients end there.
  rms_norm_backward<T>(a.k2_pre.data(), a.inv_k2.data(), dk2.data(), L, d, b.norm_k2.data(),
                       dpre.data(), false);
  if (dw[kWanK2] != nullptr) {
    linear_backward<T>(c.text, dpre.data(), L, d, w[kWanK2], d, nullptr, dw[kWanK2], true, pool);
  }
  if (dw[kWanV2] != nullptr) {
    linear_backward<T>(c.text, dv2.data(), L, d, w[kWanV2], d, nullptr, dw[kWanV2], true, pool);
  }
  rms_norm_backward<T>(a.q2_pre.data(), a.inv_q2.data(), dq.data(), S, d, b.norm_q2.data(),
                       tmp.data(), false);
  std::fill(dn.begin(), dn.end(), T(0));
  linear_backward<T>(a.n2.data(), tmp.data(), S, d, w[kWanQ2], d, dn.data(), dw[kWanQ2], true,
                     pool);
  std::vector<T>& dx2 = dx3;
  if (b.cross_attn_norm) {
    for (int64_t r = 0; r < S; ++r) {
      for (int64_t j = 0; j < d; ++j) dn[r * d + j] *= b.norm2_w[j];
    }
    layer_norm_backward(a.xhat2.data(), a.inv2.data(), dn.data(), S, d, dx2.data());
  } else {
    for (size_t e = 0; e < sd; ++e) dx2[e] += dn[e];
  }
  // x2 = x + gate_msa * to_out(att).
  for (int64_t r = 0; r < S; ++r) {
    const T* m = mod_row(a.mod, c, r, d);
    for (int64_t j = 0; j < d; ++j) tmp[r * d + j] = m[2 * d + j] * dx2[r * d + j];
  }
  std::fill(datt.begin(), datt.end(), T(0));
  linear_backward<T>(a.att.data(), tmp.data(), S, d, w[kWanOut], d, datt.data(), dw[kWanOut], true,
                     pool);
  attention_backward(a.q.data(), a.k.data(), a.v.data(), a.att.data(), a.lse.data(), datt.data(), S,
                     S, H, hd, dq.data(), dk.data(), dv.data(), pool);
  rope_interleaved(dq.data(), S, H, hd, c.cos, c.sin, true);
  rope_interleaved(dk.data(), S, H, hd, c.cos, c.sin, true);
  std::vector<T> dq_pre(sd), dk_pre(sd);
  rms_norm_backward<T>(a.q_pre.data(), a.inv_q.data(), dq.data(), S, d, b.norm_q.data(),
                       dq_pre.data(), false);
  rms_norm_backward<T>(a.k_pre.data(), a.inv_k.data(), dk.data(), S, d, b.norm_k.data(),
                       dk_pre.data(), false);
  std::fill(dn.begin(), dn.end(), T(0));
  linear_backward<T>(a.nx.data(), dq_pre.data(), S, d, w[kWanQ], d, dn.data(), dw[kWanQ], true,
                     pool);
  linear_backward<T>(a.nx.data(), dk_pre.data(), S, d, w[kWanK], d, dn.data(), dw[kWanK], true,
                     pool);
  linear_backward<T>(a.nx.data(), dv.data(), S, d, w[kWanV], d, dn.data(), dw[kWanV], true, pool);
  if (dx_out == nullptr) return;
  for (int64_t r = 0; r < S; ++r) {
    const T* m = mod_row(a.mod, c, r, d);
    for (int64_t j = 0; j < d; ++j) dn[r * d + j] *= T(1) + m[d + j];
  }
  std::copy(dx2.begin(), dx2.end(), dx_out);
  layer_norm_backward(a.xhat1.data(), a.inv1.data(), dn.data(), S, d, dx_out);
}

Status check_wan_block(const WanBlockTensors<float>& b, const std::string& where) {
  if (b.dim <= 0 || b.n_heads <= 0 || b.head_dim % 2 != 0 || b.n_heads * b.head_dim != b.dim ||
      b.ffn_dim <= 0) {
    return invalid_argument(where + ": inconsistent block dimensions (dim " +
                            std::to_string(b.dim) + ", " + std::to_string(b.n_heads) +
                            " heads of " + std::to_string(b.head_dim) + ", ffn " +
                            std::to_string(b.ffn_dim) + ")");
  }
  const auto d = static_cast<size_t>(b.dim);
  if (b.scale_shift_table.size() != 6 * d || b.norm_q.size() != d || b.norm_k.size() != d ||
      b.norm_q2.size() != d || b.norm_k2.size() != d ||
      (b.cross_attn_norm && (b.norm2_w.size() != d || b.norm2_b.size() != d))) {
    return invalid_argument(where + ": a norm or the scale_shift_table has the wrong size");
  }
  if (b.w.size() != kWanLinears || b.bias.size() != kWanLinears) {
    return invalid_argument(where + ": expected " + std::to_string(kWanLinears) + " linears");
  }
  for (int i = 0; i < kWanLinears; ++i) {
    if (static_cast<int64_t>(b.w[i].size()) != b.out_features(i) * b.in_features(i) ||
        (!b.bias[i].empty() && static_cast<int64_t>(b.bias[i].size()) != b.out_features(i))) {
      return invalid_argument(where + "." + wan_linear_name(i) + ": weight or bias size mismatch");
    }
  }
  return ok_status();
}

Result<WanBlockTensors<float>> load_wan_block(const models::Component& c,
                                              const diffusion::WanTransformerConfig& f,
                                              int64_t index) {
  WanBlockTensors<float> b;
  b.dim = f.inner_dim();
  b.n_heads = f.num_attention_heads;
  b.head_dim = f.attention_head_dim;
  b.ffn_dim = f.ffn_dim;
  b.eps = f.eps;
  b.cross_attn_norm = f.cross_attn_norm;
  const std::string p = "blocks." + std::to_string(index) + ".";
  const int64_t d = b.dim;
  QS_ASSIGN_OR_RETURN(b.scale_shift_table, c.f32(p + "scale_shift_table", {1, 6, d}));
  QS_ASSIGN_OR_RETURN(b.norm_q, c.f32(p + "attn1.norm_q.weight", {d}));
  QS_ASSIGN_OR_RETURN(b.norm_k, c.f32(p + "attn1.norm_k.weight", {d}));
  QS_ASSIGN_OR_RETURN(b.norm_q2, c.f32(p + "attn2.norm_q.weight", {d}));
  QS_ASSIGN_OR_RETURN(b.norm_k2, c.f32(p + "attn2.norm_k.weight", {d}));
  if (b.cross_attn_norm) {
    QS_ASSIGN_OR_RETURN(b.norm2_w, c.f32(p + "norm2.weight", {d}));
    QS_ASSIGN_OR_RETURN(b.norm2_b, c.f32(p + "norm2.bias", {d}));
  }
  b.w.resize(kWanLinears);
  b.bias.resize(kWanLinears);
  for (int i = 0; i < kWanLinears; ++i) {
    const std::string name = p + wan_linear_name(i);
    // f32() converts 16-bit and f32 tensors; a packed checkpoint has no dense `.weight`.
    QS_ASSIGN_OR_RETURN(b.w[i], c.f32(name + ".weight", {b.out_features(i), b.in_features(i)}));
    QS_ASSIGN_OR_RETURN(b.bias[i], c.f32(name + ".bias", {b.out_features(i)}));
  }
  QS_RETURN_IF_ERROR(check_wan_block(b, c.dir() + ": " + p.substr(0, p.size() - 1)));
  return b;
}

template struct WanBlockTensors<float>;
template struct WanBlockTensors<double>;
template void wan_block_forward<float>(const WanBlockTensors<float>&,
                                       const PerLinear<const float*>&,
                                       const WanConditioning<float>&, const float*,
                                       WanBlockActivations<float>*, float*, ThreadPool&);
template void wan_block_forward<double>(const WanBlockTensors<double>&,
                                        const PerLinear<const double*>&,
                                        const WanConditioning<double>&, const double*,
                                        WanBlockActivations<double>*, double*, ThreadPool&);
template void wan_block_backward<float>(const WanBlockTensors<float>&,
                                        const PerLinear<const float*>&,
                                        const WanConditioning<float>&,
                                        const WanBlockActivations<float>&, const float*, float*,
                                        const PerLinear<float*>&, ThreadPool&);
template void wan_block_backward<double>(const WanBlockTensors<double>&,
                                         const PerLinear<const double*>&,
                                         const WanConditioning<double>&,
                                         const WanBlockActivations<double>&, const double*, double*,
                                         const PerLinear<double*>&, ThreadPool&);

}  // namespace qs::quant
