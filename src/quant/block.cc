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

std::vector<models::LayerLinear> dense_linears(int64_t hidden, int64_t intermediate,
                                               int64_t n_heads, int64_t n_kv_heads,
                                               int64_t head_dim) {
  using models::LinearRole;
  const int64_t q = n_heads * head_dim, kv = n_kv_heads * head_dim;
  return {{"self_attn.q_proj", LinearRole::kQ, -1, false, q, hidden},
          {"self_attn.k_proj", LinearRole::kK, -1, false, kv, hidden},
          {"self_attn.v_proj", LinearRole::kV, -1, false, kv, hidden},
          {"self_attn.o_proj", LinearRole::kO, -1, false, hidden, q},
          {"mlp.gate_proj", LinearRole::kGate, -1, false, intermediate, hidden},
          {"mlp.up_proj", LinearRole::kUp, -1, false, intermediate, hidden},
          {"mlp.down_proj", LinearRole::kDown, -1, false, hidden, intermediate}};
}

Result<BlockTensors<float>> copy_block(const models::DecoderLayerWeights& layer,
                                       const models::ModelConfig& c, int64_t layer_index) {
  BlockTensors<float> b;
  b.hidden = c.hidden_size;
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
  const std::string where = "layer " + std::to_string(layer_index) + ": ";
  if (layer.sparse() != models::is_moe_layer(c, layer_index)) {
    return invalid_argument(where + "the loaded layer's MLP kind disagrees with the config");
  }
  b.linears = models::layer_linears(c, layer_index);
  b.w.resize(b.linears.size());
  b.bias.resize(b.linears.size());
  for (size_t i = 0; i < b.linears.size(); ++i) {
    const models::LayerLinear& l = b.linears[i];
    const models::ConstLinearSlot slot = models::linear_slot(layer, l);
    const ops::LinearWeight& w = *slot.weight;
    if (w.quant != nullptr || w.dense.empty()) {
      return invalid_argument(l.name +
                              ": AutoRound needs the full-precision weight, found a quantized one");
    }
    if (w.dense.rank() != 2 || w.dense.dim(0) != l.out || w.dense.dim(1) != l.in) {
      return invalid_argument(l.name + ": weight shape " + shape_string(w.dense.shape) +
                              ", expected [" + std::to_string(l.out) + ", " + std::to_string(l.in) +
                              "]");
    }
    b.w[i] = w.dense.to_f32();
    b.bias[i] = *slot.bias;
  }
  if (layer.sparse()) {
    b.moe = c.moe;
    b.router = layer.moe.router;
    b.shared_gate = layer.moe.shared_gate;
    if (static_cast<int64_t>(b.router.size()) != c.moe.n_experts * b.hidden ||
        (b.has_shared() && static_cast<int64_t>(b.shared_gate.size()) != b.hidden)) {
      return invalid_argument(where + "the router or shared-expert gate has the wrong size");
    }
  }
  if (static_cast<int64_t>(b.attn_norm.size()) != b.hidden ||
      static_cast<int64_t>(b.mlp_norm.size()) != b.hidden) {
    return invalid_argument(where + "norm weights do not have hidden_size entries");
  }
  return b;
}

namespace {

// y [m, hidden] = SwiGLU MLP group `g` of the block on h [m, hidden] (gate/up/act [m, inter]).
template <class T>
void swiglu_forward(const BlockTensors<T>& b, const PerLinear<const T*>& w, int64_t g, const T* h,
                    int64_t m, T* gate, T* up, T* act, T* y, ThreadPool& pool) {
  if (m == 0) return;
  const int gi = mlp_linear(g, kMlpGate), ui = mlp_linear(g, kMlpUp), di = mlp_linear(g, kMlpDown);
  const int64_t d = b.hidden, inter = b.out_features(gi);
  linear_forward<T>(h, m, d, w[gi], inter, bias_or_null(b.bias[gi]), gate, pool, b.products);
  linear_forward<T>(h, m, d, w[ui], inter, bias_or_null(b.bias[ui]), up, pool, b.products);
  pool.parallel_for(
      m * inter,
      [&](int64_t b0, int64_t e) { silu_mul_forward<T>(gate + b0, up + b0, e - b0, act + b0); },
      kElementGrain);
  linear_forward<T>(act, m, inter, w[di], d, bias_or_null(b.bias[di]), y, pool, b.products);
}

// Its backward from dy [m, hidden]: dh [m, hidden] accumulated, dW of the three linears added.
// dact, dgate, dup: scratch [m, inter].
template <class T>
void swiglu_backward(const BlockTensors<T>& b, const PerLinear<const T*>& w,
                     const PerLinear<T*>& dw, int64_t g, const T* h, int64_t m, const T* gate,
                     const T* up, const T* act, const T* dy, T* dact, T* dgate, T* dup, T* dh,
                     ThreadPool& pool) {
  if (m == 0) return;
  const int gi = mlp_linear(g, kMlpGate), ui = mlp_linear(g, kMlpUp), di = mlp_linear(g, kMlpDown);
  const int64_t d = b.hidden, inter = b.out_features(gi);
  std::fill_n(dact, m * inter, T(0));  // the weight gradient accumulates, so dX does too
  linear_backward<T>(act, dy, m, inter, w[di], d, dact, dw[di], true, pool, b.products);
  pool.parallel_for(
      m * inter,
      [&](int64_t b0, int64_t e) {
        silu_mul_backward<T>(gate + b0, up + b0, dact + b0, e - b0, dgate + b0, dup + b0);
      },
      kElementGrain);
  linear_backward<T>(h, dgate, m, d, w[gi], inter, dh, dw[gi], true, pool, b.products);
  linear_backward<T>(h, dup, m, d, w[ui], inter, dh, dw[ui], true, pool, b.products);
}

// out [m, hidden] = the MoE MLP on h2 (models::moe_block's math), saving what the backward needs.
template <class T>
void moe_forward(const BlockTensors<T>& b, const PerLinear<const T*>& w, int64_t m,
                 BlockActivations<T>& a, T* out, ThreadPool& pool) {
  const int64_t d = b.hidden, n_experts = b.moe.n_experts, k = b.moe.top_k;
  const int64_t inter = b.moe.expert_intermediate, slots = m * k;
  a.probs.resize(m * n_experts);
  a.routes.resize(slots);
  a.route_w.resize(slots);
  linear_forward<T>(a.h2.data(), m, d, b.router.data(), n_experts, nullptr, a.probs.data(), pool);
  models::route_top_k<T>(b.moe, a.probs.data(), m, a.routes.data(), a.route_w.data());
  std::vector<int64_t> next;
  models::sort_slots_by_expert(a.routes, n_experts, &a.expert_first, &a.slot_of_row, &next);
  a.expert_x.resize(slots * d);
  for (int64_t r = 0; r < slots; ++r) {
    std::copy_n(a.h2.data() + (a.slot_of_row[r] / k) * d, d, a.expert_x.data() + r * d);
  }
  a.gate.resize(slots * inter);
  a.up.resize(slots * inter);
  a.act.resize(slots * inter);
  a.expert_y.resize(slots * d);
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t r0 = a.expert_first[e], rows = a.expert_first[e + 1] - r0;
    swiglu_forward<T>(b, w, e, a.expert_x.data() + r0 * d, rows, a.gate.data() + r0 * inter,
                      a.up.data() + r0 * inter, a.act.data() + r0 * inter,
                      a.expert_y.data() + r0 * d, pool);
  }
  models::combine_expert_rows<T>(a.slot_of_row, k, a.route_w.data(), a.expert_y.data(), m, d, out);
  if (!b.has_shared()) return;
  const int64_t s_inter = b.moe.shared_intermediate;
  a.s_gate.resize(m * s_inter);
  a.s_up.resize(m * s_inter);
  a.s_act.resize(m * s_inter);
  a.s_out.resize(m * d);
  a.s_sig.resize(m);
  swiglu_forward<T>(b, w, n_experts, a.h2.data(), m, a.s_gate.data(), a.s_up.data(), a.s_act.data(),
                    a.s_out.data(), pool);
  linear_forward<T>(a.h2.data(), m, d, b.shared_gate.data(), 1, nullptr, a.s_sig.data(), pool);
  for (int64_t t = 0; t < m; ++t) {
    const T g = T(1) / (T(1) + std::exp(-a.s_sig[t]));
    a.s_sig[t] = g;
    for (int64_t j = 0; j < d; ++j) out[t * d + j] += g * a.s_out[t * d + j];
  }
}

// dL/dh2 [m, hidden] (overwritten) of the MoE MLP from dL/dout = dy, the choices held fixed.
template <class T>
void moe_backward(const BlockTensors<T>& b, const PerLinear<const T*>& w, const PerLinear<T*>& dw,
                  const BlockActivations<T>& a, const T* dy, T* dh2, BlockBackwardScratch<T>& sc,
                  ThreadPool& pool) {
  const int64_t m = a.n_seqs * a.seqlen, d = b.hidden, n_experts = b.moe.n_experts;
  const int64_t k = b.moe.top_k, inter = b.moe.expert_intermediate, slots = m * k;
  // Each row's output was weight * expert_y: its gradient is weight * dy, and the weight's is
  // <expert_y, dy>.
  std::vector<T> dweight(slots);
  sc.dexpert_y.resize(slots * d);
  for (int64_t r = 0; r < slots; ++r) {
    const int32_t slot = a.slot_of_row[r];
    const T* g = dy + (slot / k) * d;
    const T* y = a.expert_y.data() + r * d;
    T* dyr = sc.dexpert_y.data() + r * d;
    T dot = 0;
    for (int64_t j = 0; j < d; ++j) {
      dyr[j] = a.route_w[slot] * g[j];
      dot += y[j] * g[j];
    }
    dweight[slot] = dot;
  }
  sc.dact.resize(slots * inter);
  sc.dgate.resize(slots * inter);
  sc.dup.resize(slots * inter);
  sc.dexpert_x.assign(slots * d, T(0));
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t r0 = a.expert_first[e], rows = a.expert_first[e + 1] - r0;
    const int64_t ri = r0 * inter;
    swiglu_backward<T>(b, w, dw, e, a.expert_x.data() + r0 * d, rows, a.gate.data() + ri,
                       a.up.data() + ri, a.act.data() + ri, sc.dexpert_y.data() + r0 * d,
                       sc.dact.data() + ri, sc.dgate.data() + ri, sc.dup.data() + ri,
                       sc.dexpert_x.data() + r0 * d, pool);
  }
  std::fill_n(dh2, m * d, T(0));
  for (int64_t r = 0; r < slots; ++r) {
    T* o = dh2 + (a.slot_of_row[r] / k) * d;
    const T* g = sc.dexpert_x.data() + r * d;
    for (int64_t j = 0; j < d; ++j) o[j] += g[j];
  }
  // Routing weights -> probabilities -> logits. With norm_topk_prob w_j = p_j / S over the
  // chosen: dL/dp_j = (g_j - sum_i g_i w_i) / S; without, dL/dp_j = g_j. Softmax:
  // dL/dl_e = p_e (dL/dp_e - sum_e' p_e' dL/dp_e').
  sc.dprobs.assign(m * n_experts, T(0));
  for (int64_t t = 0; t < m; ++t) {
    const T* p = a.probs.data() + t * n_experts;
    const int32_t* r = a.routes.data() + t * k;
    const T* wt = a.route_w.data() + t * k;
    const T* g = dweight.data() + t * k;
    T* dp = sc.dprobs.data() + t * n_experts;
    if (b.moe.norm_topk_prob) {
      T picked = 0, gw = 0;
      for (int64_t j = 0; j < k; ++j) {
        picked += p[r[j]];
        gw += g[j] * wt[j];
      }
      for (int64_t j = 0; j < k; ++j) dp[r[j]] = (g[j] - gw) / picked;
    } else {
      for (int64_t j = 0; j < k; ++j) dp[r[j]] = g[j];
    }
    T dot = 0;
    for (int64_t e = 0; e < n_experts; ++e) dot += p[e] * dp[e];
    for (int64_t e = 0; e < n_experts; ++e) dp[e] = p[e] * (dp[e] - dot);
  }
  linear_backward<T>(a.h2.data(), sc.dprobs.data(), m, d, b.router.data(), n_experts, dh2, nullptr,
                     true, pool);
  if (!b.has_shared()) return;
  // out += sigmoid(h2 . gate) * shared(h2).
  const int64_t s_inter = b.moe.shared_intermediate;
  sc.ds_out.resize(m * d);
  std::vector<T> dlogit(m);
  for (int64_t t = 0; t < m; ++t) {
    const T sg = a.s_sig[t];
    T dot = 0;
    for (int64_t j = 0; j < d; ++j) {
      sc.ds_out[t * d + j] = sg * dy[t * d + j];
      dot += a.s_out[t * d + j] * dy[t * d + j];
    }
    dlogit[t] = dot * sg * (T(1) - sg);
  }
  linear_backward<T>(a.h2.data(), dlogit.data(), m, d, b.shared_gate.data(), 1, dh2, nullptr, true,
                     pool);
  sc.dact.resize(m * s_inter);
  sc.dgate.resize(m * s_inter);
  sc.dup.resize(m * s_inter);
  swiglu_backward<T>(b, w, dw, n_experts, a.h2.data(), m, a.s_gate.data(), a.s_up.data(),
                     a.s_act.data(), sc.ds_out.data(), sc.dact.data(), sc.dgate.data(),
                     sc.dup.data(), dh2, pool);
}

}  // namespace

template <class T>
void block_forward(const BlockTensors<T>& b, const PerLinear<const T*>& w, const T* x,
                   int64_t n_seqs, int64_t seqlen, const uint8_t* mask, BlockActivations<T>* act,
                   T* y, ThreadPool& pool) {
  BlockActivations<T> local;
  BlockActivations<T>& a = act != nullptr ? *act : local;
  const int64_t m = n_seqs * seqlen, d = b.hidden, hd = b.head_dim;
  const int64_t q_dim = b.n_heads * hd, kv_dim = b.n_kv_heads * hd;
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
                    pool, b.products);
  linear_forward<T>(a.h1.data(), m, d, w[kKProj], kv_dim, bias_or_null(b.bias[kKProj]), a.k.data(),
                    pool, b.products);
  linear_forward<T>(a.h1.data(), m, d, w[kVProj], kv_dim, bias_or_null(b.bias[kVProj]), a.v.data(),
                    pool, b.products);
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
                    1.0 / std::sqrt(static_cast<double>(hd)),
                    b.products};
  a.attn.resize(m * q_dim);
  a.lse.resize(n_seqs * b.n_heads * seqlen);
  attention_forward<T>(as, a.q.data(), a.k.data(), a.v.data(), mask, a.attn.data(), a.lse.data(),
                       pool);

  a.x2.resize(m * d);
  linear_forward<T>(a.attn.data(), m, q_dim, w[kOProj], d, bias_or_null(b.bias[kOProj]),
                    a.x2.data(), pool, b.products);
  for (int64_t i = 0; i < m * d; ++i) a.x2[i] += x[i];

  a.inv_rms2.resize(m);
  a.h2.resize(m * d);
  norm_forward<T>(pool, a.x2.data(), m, d, b.mlp_norm.data(), b.rms_norm_eps, a.h2.data(),
                  a.inv_rms2.data());
  if (b.sparse()) {
    moe_forward<T>(b, w, m, a, y, pool);
  } else {
    const int64_t inter = b.out_features(kGateProj);
    a.gate.resize(m * inter);
    a.up.resize(m * inter);
    a.act.resize(m * inter);
    swiglu_forward<T>(b, w, 0, a.h2.data(), m, a.gate.data(), a.up.data(), a.act.data(), y, pool);
  }
  for (int64_t i = 0; i < m * d; ++i) y[i] += a.x2[i];
}

template <class T>
void block_backward(const BlockTensors<T>& b, const PerLinear<const T*>& w,
                    const BlockActivations<T>& a, const uint8_t* mask, const T* dy, T* dx,
                    const PerLinear<T*>& dw, ThreadPool& pool, BlockBackwardScratch<T>* scratch) {
  BlockBackwardScratch<T> local;
  BlockBackwardScratch<T>& sc = scratch != nullptr ? *scratch : local;
  const int64_t m = a.n_seqs * a.seqlen, d = b.hidden, hd = b.head_dim;
  const int64_t q_dim = b.n_heads * hd, kv_dim = b.n_kv_heads * hd;
  // MLP: y = x2 + mlp(h2), h2 = norm(x2).
  std::vector<T>& dh2 = sc.dh2;
  dh2.resize(m * d);
  if (b.sparse()) {
    moe_backward<T>(b, w, dw, a, dy, dh2.data(), sc, pool);
  } else {
    const int64_t inter = b.out_features(kGateProj);
    sc.dact.resize(m * inter);
    sc.dgate.resize(m * inter);
    sc.dup.resize(m * inter);
    std::fill(dh2.begin(), dh2.end(), T(0));
    swiglu_backward<T>(b, w, dw, 0, a.h2.data(), m, a.gate.data(), a.up.data(), a.act.data(), dy,
                       sc.dact.data(), sc.dgate.data(), sc.dup.data(), dh2.data(), pool);
  }
  std::vector<T>& dx2 = sc.dx2;
  dx2.assign(dy, dy + m * d);
  norm_backward<T>(pool, a.x2.data(), a.inv_rms2.data(), dh2.data(), m, d, b.mlp_norm.data(),
                   dx2.data(), true);

  // Attention: x2 = x + o(attention(rope(norm(q h1)), rope(norm(k h1)), v h1)).
  std::vector<T>& dattn = sc.dattn;
  dattn.assign(m * q_dim, T(0));
  linear_backward<T>(a.attn.data(), dx2.data(), m, q_dim, w[kOProj], d, dattn.data(), dw[kOProj],
                     true, pool, b.products);
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
                    1.0 / std::sqrt(static_cast<double>(hd)),
                    b.products};
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
  linear_backward<T>(a.h1.data(), dq.data(), m, d, w[kQProj], q_dim, dh1, dw[kQProj], true, pool,
                     b.products);
  linear_backward<T>(a.h1.data(), dk.data(), m, d, w[kKProj], kv_dim, dh1, dw[kKProj], true, pool,
                     b.products);
  linear_backward<T>(a.h1.data(), dv.data(), m, d, w[kVProj], kv_dim, dh1, dw[kVProj], true, pool,
                     b.products);
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
