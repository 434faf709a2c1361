// quant: differentiable decoder block (block.h).
#include "quant/block.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "quant/grad_ops.h"

namespace qs::quant {
namespace {

template <class T>
const T* bias_or_null(const std::vector<T>& b) {
  return b.empty() ? nullptr : b.data();
}

// The per-row and element-wise ops split over the pool: for a real block (16K tokens x 14K
// intermediate) the SwiGLU's exp() alone would otherwise cost seconds per iteration.
template <class T>
void norm_forward(ThreadPool& pool, const T* x, int64_t m, int64_t d, const T* w, double eps, T* y,
                  T* inv_rms) {
  pool.parallel_for(m, [&](int64_t b, int64_t e) {
    rms_norm_forward<T>(x + b * d, e - b, d, w, eps, y + b * d, inv_rms + b);
  });
}

template <class T>
void norm_backward(ThreadPool& pool, const T* x, const T* inv_rms, const T* dy, int64_t m,
                   int64_t d, const T* w, T* dx, bool accumulate) {
  pool.parallel_for(m, [&](int64_t b, int64_t e) {
    rms_norm_backward<T>(x + b * d, inv_rms + b, dy + b * d, e - b, d, w, dx + b * d, accumulate);
  });
}

constexpr int64_t kElementGrain = 4096;

}  // namespace

const char* linear_name(int index) {
  static const char* const kNames[kNumLinears] = {
      "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
      "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  return index >= 0 && index < kNumLinears ? kNames[index] : "?";
}

template <class T>
int64_t BlockTensors<T>::out_features(int i) const {
  switch (i) {
    case kQProj:
      return n_heads * head_dim;
    case kKProj:
    case kVProj:
      return n_kv_heads * head_dim;
    case kOProj:
    case kDownProj:
      return hidden;
    default:
      return intermediate;
  }
}

template <class T>
int64_t BlockTensors<T>::in_features(int i) const {
  if (i == kOProj) return n_heads * head_dim;
  if (i == kDownProj) return intermediate;
  return hidden;
}

Result<BlockTensors<float>> copy_block(const models::DecoderLayerWeights& layer,
                                       const models::ModelConfig& c, int64_t layer_index) {
  BlockTensors<float> b;
  b.hidden = c.hidden_size;
  b.intermediate = c.intermediate_size;
  b.n_heads = c.n_heads;
  b.n_kv_heads = c.n_kv_heads;
  b.head_dim = c.head_dim;
  b.rms_norm_eps = c.rms_norm_eps;
  b.sliding_window = layer.attn.sliding_window;
  b.attn_norm = layer.attn_norm;
  b.mlp_norm = layer.mlp_norm;
  b.q_norm = layer.attn.q_norm;
  b.k_norm = layer.attn.k_norm;
  b.inv_freq = models::rope_inv_freq(c);
  const ops::LinearWeight* ws[kNumLinears] = {&layer.attn.wq, &layer.attn.wk,  &layer.attn.wv,
                                              &layer.attn.wo, &layer.mlp.gate, &layer.mlp.up,
                                              &layer.mlp.down};
  const std::vector<float>* biases[kNumLinears] = {
      &layer.attn.bq,    &layer.attn.bk,  &layer.attn.bv,   &layer.attn.bo,
      &layer.mlp.b_gate, &layer.mlp.b_up, &layer.mlp.b_down};
  const std::string where = "layer " + std::to_string(layer_index) + " ";
  for (int i = 0; i < kNumLinears; ++i) {
    const ops::LinearWeight& w = *ws[i];
    if (w.quant != nullptr || w.dense.empty()) {
      return invalid_argument(where + linear_name(i) +
                              ": AutoRound needs the full-precision weight, found a quantized one");
    }
    if (w.dense.rank() != 2 || w.dense.dim(0) != b.out_features(i) ||
        w.dense.dim(1) != b.in_features(i)) {
      return invalid_argument(where + linear_name(i) + ": weight shape " +
                              shape_string(w.dense.shape) + ", expected [" +
                              std::to_string(b.out_features(i)) + ", " +
                              std::to_string(b.in_features(i)) + "]");
    }
    b.w[i] = w.dense.to_f32();
    b.bias[i] = *biases[i];
  }
  if (static_cast<int64_t>(b.attn_norm.size()) != b.hidden ||
      static_cast<int64_t>(b.mlp_norm.size()) != b.hidden) {
    return invalid_argument(where + "norm weights do not have hidden_size entries");
  }
  return b;
}

template <class T>
void block_forward(const BlockTensors<T>& b, const PerLinear<const T*>& w, const T* x,
                   int64_t n_seqs, int64_t seqlen, const uint8_t* mask, BlockActivations<T>* act,
                   T* y, ThreadPool& pool) {
  BlockActivations<T> local;
  BlockActivations<T>& a = act != nullptr ? *act : local;
  const int64_t m = n_seqs * seqlen, d = b.hidden, hd = b.head_dim;
  const int64_t q_dim = b.n_heads * hd, kv_dim = b.n_kv_heads * hd, inter = b.intermediate;
  a.n_seqs = n_seqs;
  a.seqlen = seqlen;
  a.x.assign(x, x + m * d);
  a.inv_rms1.resize(m);
  a.h1.resize(m * d);
  norm_forward<T>(pool, x, m, d, b.attn_norm.data(), b.rms_norm_eps, a.h1.data(),
                  a.inv_rms1.data());

  a.q.resize(m * q_dim);
  a.k.resize(m * kv_dim);
  a.v.resize(m * kv_dim);
  linear_forward<T>(a.h1.data(), m, d, w[kQProj], q_dim, bias_or_null(b.bias[kQProj]), a.q.data(),
                    pool);
  linear_forward<T>(a.h1.data(), m, d, w[kKProj], kv_dim, bias_or_null(b.bias[kKProj]), a.k.data(),
                    pool);
  linear_forward<T>(a.h1.data(), m, d, w[kVProj], kv_dim, bias_or_null(b.bias[kVProj]), a.v.data(),
                    pool);
  if (!b.q_norm.empty()) {
    // Qwen3: RMSNorm over head_dim of each head, before RoPE.
    a.q_pre = a.q;
    a.k_pre = a.k;
    a.inv_rms_q.resize(m * b.n_heads);
    a.inv_rms_k.resize(m * b.n_kv_heads);
    norm_forward<T>(pool, a.q_pre.data(), m * b.n_heads, hd, b.q_norm.data(), b.rms_norm_eps,
                    a.q.data(), a.inv_rms_q.data());
    norm_forward<T>(pool, a.k_pre.data(), m * b.n_kv_heads, hd, b.k_norm.data(), b.rms_norm_eps,
                    a.k.data(), a.inv_rms_k.data());
  }
  // cos/sin in f32 exactly as models::rope_tables (transformers computes them in f32 too).
  std::vector<int32_t> positions(seqlen);
  for (int64_t t = 0; t < seqlen; ++t) positions[t] = static_cast<int32_t>(t);
  std::vector<float> inv_freq(b.inv_freq.begin(), b.inv_freq.end()), cos_f, sin_f;
  models::rope_tables(inv_freq, positions, &cos_f, &sin_f);
  a.cos.assign(cos_f.begin(), cos_f.end());
  a.sin.assign(sin_f.begin(), sin_f.end());
  for (int64_t s = 0; s < n_seqs; ++s) {
    rope_forward<T>(a.q.data() + s * seqlen * q_dim, seqlen, b.n_heads, hd, a.cos.data(),
                    a.sin.data());
    rope_forward<T>(a.k.data() + s * seqlen * kv_dim, seqlen, b.n_kv_heads, hd, a.cos.data(),
                    a.sin.data());
  }

  AttentionShape as{n_seqs,
                    seqlen,
                    b.n_heads,
                    b.n_kv_heads,
                    hd,
                    b.sliding_window,
                    1.0 / std::sqrt(static_cast<double>(hd))};
  a.attn.resize(m * q_dim);
  a.lse.resize(n_seqs * b.n_heads * seqlen);
  attention_forward<T>(as, a.q.data(), a.k.data(), a.v.data(), mask, a.attn.data(), a.lse.data(),
                       pool);

  a.x2.resize(m * d);
  linear_forward<T>(a.attn.data(), m, q_dim, w[kOProj], d, bias_or_null(b.bias[kOProj]),
                    a.x2.data(), pool);
  for (int64_t i = 0; i < m * d; ++i) a.x2[i] += x[i];

  a.inv_rms2.resize(m);
  a.h2.resize(m * d);
  norm_forward<T>(pool, a.x2.data(), m, d, b.mlp_norm.data(), b.rms_norm_eps, a.h2.data(),
                  a.inv_rms2.data());
  a.gate.resize(m * inter);
  a.up.resize(m * inter);
  a.act.resize(m * inter);
  linear_forward<T>(a.h2.data(), m, d, w[kGateProj], inter, bias_or_null(b.bias[kGateProj]),
                    a.gate.data(), pool);
  linear_forward<T>(a.h2.data(), m, d, w[kUpProj], inter, bias_or_null(b.bias[kUpProj]),
                    a.up.data(), pool);
  pool.parallel_for(
      m * inter,
      [&](int64_t b0, int64_t e) {
        silu_mul_forward<T>(a.gate.data() + b0, a.up.data() + b0, e - b0, a.act.data() + b0);
      },
      kElementGrain);
  linear_forward<T>(a.act.data(), m, inter, w[kDownProj], d, bias_or_null(b.bias[kDownProj]), y,
                    pool);
  for (int64_t i = 0; i < m * d; ++i) y[i] += a.x2[i];
}

template <class T>
void block_backward(const BlockTensors<T>& b, const PerLinear<const T*>& w,
                    const BlockActivations<T>& a, const uint8_t* mask, const T* dy, T* dx,
                    const PerLinear<T*>& dw, ThreadPool& pool, BlockBackwardScratch<T>* scratch) {
  BlockBackwardScratch<T> local;
  BlockBackwardScratch<T>& sc = scratch != nullptr ? *scratch : local;
  const int64_t m = a.n_seqs * a.seqlen, d = b.hidden, hd = b.head_dim;
  const int64_t q_dim = b.n_heads * hd, kv_dim = b.n_kv_heads * hd, inter = b.intermediate;
  // MLP: y = x2 + down(silu(gate h2) * up h2), h2 = norm(x2).
  std::vector<T>&dact = sc.dact, &dgate = sc.dgate, &dup = sc.dup, &dh2 = sc.dh2;
  dact.assign(m * inter, T(0));  // the down projection's dX accumulates into it
  dgate.resize(m * inter);
  dup.resize(m * inter);
  dh2.resize(m * d);
  linear_backward<T>(a.act.data(), dy, m, inter, w[kDownProj], d, dact.data(), dw[kDownProj], true,
                     pool);
  pool.parallel_for(
      m * inter,
      [&](int64_t b0, int64_t e) {
        silu_mul_backward<T>(a.gate.data() + b0, a.up.data() + b0, dact.data() + b0, e - b0,
                             dgate.data() + b0, dup.data() + b0);
      },
      kElementGrain);
  std::fill(dh2.begin(), dh2.end(), T(0));
  linear_backward<T>(a.h2.data(), dgate.data(), m, d, w[kGateProj], inter, dh2.data(),
                     dw[kGateProj], true, pool);
  linear_backward<T>(a.h2.data(), dup.data(), m, d, w[kUpProj], inter, dh2.data(), dw[kUpProj],
                     true, pool);
  std::vector<T>& dx2 = sc.dx2;
  dx2.assign(dy, dy + m * d);
  norm_backward<T>(pool, a.x2.data(), a.inv_rms2.data(), dh2.data(), m, d, b.mlp_norm.data(),
                   dx2.data(), true);

  // Attention: x2 = x + o(attention(rope(norm(q h1)), rope(norm(k h1)), v h1)).
  std::vector<T>& dattn = sc.dattn;
  dattn.assign(m * q_dim, T(0));
  linear_backward<T>(a.attn.data(), dx2.data(), m, q_dim, w[kOProj], d, dattn.data(), dw[kOProj],
                     true, pool);
  std::vector<T>&dq = sc.dq, &dk = sc.dk, &dv = sc.dv;
  dq.resize(m * q_dim);
  dk.resize(m * kv_dim);
  dv.resize(m * kv_dim);
  AttentionShape as{a.n_seqs,
                    a.seqlen,
                    b.n_heads,
                    b.n_kv_heads,
                    hd,
                    b.sliding_window,
                    1.0 / std::sqrt(static_cast<double>(hd))};
  attention_backward<T>(as, a.q.data(), a.k.data(), a.v.data(), mask, a.attn.data(), a.lse.data(),
                        dattn.data(), dq.data(), dk.data(), dv.data(), pool);
  for (int64_t s = 0; s < a.n_seqs; ++s) {
    rope_backward<T>(dq.data() + s * a.seqlen * q_dim, a.seqlen, b.n_heads, hd, a.cos.data(),
                     a.sin.data());
    rope_backward<T>(dk.data() + s * a.seqlen * kv_dim, a.seqlen, b.n_kv_heads, hd, a.cos.data(),
                     a.sin.data());
  }
  if (!b.q_norm.empty()) {
    std::vector<T>&dq_pre = sc.dq_pre, &dk_pre = sc.dk_pre;
    dq_pre.resize(m * q_dim);
    dk_pre.resize(m * kv_dim);
    norm_backward<T>(pool, a.q_pre.data(), a.inv_rms_q.data(), dq.data(), m * b.n_heads, hd,
                     b.q_norm.data(), dq_pre.data(), false);
    norm_backward<T>(pool, a.k_pre.data(), a.inv_rms_k.data(), dk.data(), m * b.n_kv_heads, hd,
                     b.k_norm.data(), dk_pre.data(), false);
    dq.swap(dq_pre);
    dk.swap(dk_pre);
  }
  // dL/dh1 only feeds dL/dx: without dx, the three dX products are skipped.
  T* dh1 = nullptr;
  if (dx != nullptr) {
    sc.dh1.assign(m * d, T(0));
    dh1 = sc.dh1.data();
  }
  linear_backward<T>(a.h1.data(), dq.data(), m, d, w[kQProj], q_dim, dh1, dw[kQProj], true, pool);
  linear_backward<T>(a.h1.data(), dk.data(), m, d, w[kKProj], kv_dim, dh1, dw[kKProj], true, pool);
  linear_backward<T>(a.h1.data(), dv.data(), m, d, w[kVProj], kv_dim, dh1, dw[kVProj], true, pool);
  if (dx != nullptr) {
    std::copy(dx2.begin(), dx2.end(), dx);
    norm_backward<T>(pool, a.x.data(), a.inv_rms1.data(), dh1, m, d, b.attn_norm.data(), dx, true);
  }
}

template struct BlockTensors<float>;
template struct BlockTensors<double>;
template void block_forward<float>(const BlockTensors<float>&, const PerLinear<const float*>&,
                                   const float*, int64_t, int64_t, const uint8_t*,
                                   BlockActivations<float>*, float*, ThreadPool&);
template void block_forward<double>(const BlockTensors<double>&, const PerLinear<const double*>&,
                                    const double*, int64_t, int64_t, const uint8_t*,
                                    BlockActivations<double>*, double*, ThreadPool&);
template void block_backward<float>(const BlockTensors<float>&, const PerLinear<const float*>&,
                                    const BlockActivations<float>&, const uint8_t*, const float*,
                                    float*, const PerLinear<float*>&, ThreadPool&,
                                    BlockBackwardScratch<float>*);
template void block_backward<double>(const BlockTensors<double>&, const PerLinear<const double*>&,
                                     const BlockActivations<double>&, const uint8_t*, const double*,
                                     double*, const PerLinear<double*>&, ThreadPool&,
                                     BlockBackwardScratch<double>*);

}  // namespace qs::quant
