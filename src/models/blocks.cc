// models: shared decoder blocks (see blocks.h).
#include "models/blocks.h"

#include <algorithm>
#include <cmath>

#include "ops/backend.h"
#include "ops/linear.h"

namespace qs::models {
namespace {

// A norm weight or bias as the backend holds it (nullptr for an empty vector: no bias).
const float* param(const BlockScratch& s, const std::vector<float>& v) {
  return s.backend->params(v);
}

// A borrowed [rows, cols] view of f32 weights held in a vector.
Tensor f32_view(const std::vector<float>& v, int64_t rows, int64_t cols) {
  Tensor t;
  t.dtype = DType::kF32;
  t.shape = {rows, cols};
  t.data = v.data();
  return t;
}

}  // namespace

void rope_tables(std::span<const float> inv_freq, std::span<const int32_t> positions,
                 std::vector<float>* cos, std::vector<float>* sin) {
  const size_t half = inv_freq.size();
  cos->resize(positions.size() * half);
  sin->resize(positions.size() * half);
  for (size_t t = 0; t < positions.size(); ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (size_t j = 0; j < half; ++j) {
      const float angle = pos * inv_freq[j];
      (*cos)[t * half + j] = std::cos(angle);
      (*sin)[t * half + j] = std::sin(angle);
    }
  }
}

void rope_tables_mrope(std::span<const float> inv_freq, std::span<const int64_t> section,
                       std::span<const int32_t> positions3, int64_t n_tokens,
                       std::vector<float>* cos, std::vector<float>* sin) {
  const size_t half = inv_freq.size();
  std::vector<int> axis(half, 2);
  for (size_t j = 0, a = 0, end = static_cast<size_t>(section[0]); j < half; ++j) {
    while (j >= end && a < 2) end += static_cast<size_t>(section[++a]);
    axis[j] = static_cast<int>(a);
  }
  cos->resize(static_cast<size_t>(n_tokens) * half);
  sin->resize(static_cast<size_t>(n_tokens) * half);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (size_t j = 0; j < half; ++j) {
      const float pos = static_cast<float>(positions3[axis[j] * n_tokens + t]);
      const float angle = pos * inv_freq[j];
      (*cos)[t * half + j] = std::cos(angle);
      (*sin)[t * half + j] = std::sin(angle);
    }
  }
}

Status attention_block(const ModelConfig& c, const AttentionWeights& w, const float* h,
                       int64_t n_tokens, const float* cos, const float* sin,
                       const ops::PagedKvLayer& cache, std::span<const ops::AttentionSeq> seqs,
                       BlockScratch& s, float* out, ThreadPool& pool) {
  ops::Backend& b = *s.backend;
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  QS_RETURN_IF_ERROR(s.q.resize(b, n_tokens * q_dim));
  QS_RETURN_IF_ERROR(s.k.resize(b, n_tokens * kv_dim));
  QS_RETURN_IF_ERROR(s.v.resize(b, n_tokens * kv_dim));
  QS_RETURN_IF_ERROR(s.attn.resize(b, n_tokens * q_dim));
  const ops::LinearOut qkv[] = {{&w.wq, param(s, w.bq), s.q.data()},
                                {&w.wk, param(s, w.bk), s.k.data()},
                                {&w.wv, param(s, w.bv), s.v.data()}};
  QS_RETURN_IF_ERROR(b.linear_many(h, n_tokens, qkv, pool));
  if (!w.q_norm.empty()) {
    // Qwen3: RMSNorm over head_dim of each head, before RoPE.
    const float eps = static_cast<float>(c.rms_norm_eps);
    b.rms_norm(s.q.data(), n_tokens * c.n_heads, c.head_dim, param(s, w.q_norm), eps, s.q.data());
    b.rms_norm(s.k.data(), n_tokens * c.n_kv_heads, c.head_dim, param(s, w.k_norm), eps,
               s.k.data());
  }
  b.rope_rotate_half(s.q.data(), n_tokens, c.n_heads, c.head_dim, cos, sin);
  b.rope_rotate_half(s.k.data(), n_tokens, c.n_kv_heads, c.head_dim, cos, sin);
  b.paged_kv_write(cache, seqs, s.k.data(), s.v.data());
  ops::AttentionParams params;
  params.n_heads = c.n_heads;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.sliding_window = w.sliding_window;
  QS_RETURN_IF_ERROR(b.paged_attention(s.q.data(), cache, seqs, params, s.attn.data(), pool));
  return b.linear(s.attn.data(), n_tokens, w.wo, param(s, w.bo), out, pool);
}

Status mlp_block(const MlpWeights& w, const float* h, int64_t n_tokens, BlockScratch& s, float* out,
                 ThreadPool& pool) {
  ops::Backend& b = *s.backend;
  const int64_t inter = w.gate.rows();
  QS_RETURN_IF_ERROR(s.gate.resize(b, n_tokens * inter));
  QS_RETURN_IF_ERROR(s.up.resize(b, n_tokens * inter));
  const ops::LinearOut gate_up[] = {{&w.gate, param(s, w.b_gate), s.gate.data()},
                                    {&w.up, param(s, w.b_up), s.up.data()}};
  QS_RETURN_IF_ERROR(b.linear_many(h, n_tokens, gate_up, pool));
  b.silu_mul(s.gate.data(), s.up.data(), n_tokens * inter, s.gate.data());
  return b.linear(s.gate.data(), n_tokens, w.down, param(s, w.b_down), out, pool);
}

template <class T>
void route_top_k(const MoeConfig& moe, T* probs, int64_t n_tokens, int32_t* routes, T* weights) {
  const int64_t n_experts = moe.n_experts, k = moe.top_k;
  for (int64_t t = 0; t < n_tokens; ++t) {
    T* p = probs + t * n_experts;
    T max = p[0];
    for (int64_t e = 1; e < n_experts; ++e) max = std::max(max, p[e]);
    T sum = 0;
    for (int64_t e = 0; e < n_experts; ++e) {
      p[e] = std::exp(p[e] - max);
      sum += p[e];
    }
    for (int64_t e = 0; e < n_experts; ++e) p[e] /= sum;
    // Selection by repeated maximum: k is small (2..10), and a strict > keeps the lower id on
    // ties, as torch.topk does on CPU.
    int32_t* r = routes + t * k;
    T* w = weights + t * k;
    T picked_sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      for (int64_t e = 0; e < n_experts; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || r[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = static_cast<int32_t>(e);
      }
      r[j] = best;
      w[j] = p[best];
      picked_sum += p[best];
    }
    if (moe.norm_topk_prob) {
      for (int64_t j = 0; j < k; ++j) w[j] /= picked_sum;
    }
  }
}

template void route_top_k<float>(const MoeConfig&, float*, int64_t, int32_t*, float*);
template void route_top_k<double>(const MoeConfig&, double*, int64_t, int32_t*, double*);

void sort_slots_by_expert(std::span<const int32_t> routes, int64_t n_experts,
                          std::vector<int64_t>* first, std::vector<int32_t>* rows,
                          std::vector<int64_t>* next) {
  first->assign(n_experts + 1, 0);
  for (int32_t e : routes) ++(*first)[e + 1];
  for (int64_t e = 0; e < n_experts; ++e) (*first)[e + 1] += (*first)[e];
  next->assign(first->begin(), first->end() - 1);
  rows->resize(routes.size());
  for (size_t slot = 0; slot < routes.size(); ++slot) {
    (*rows)[(*next)[routes[slot]]++] = static_cast<int32_t>(slot);
  }
}

template <class T>
void combine_expert_rows(std::span<const int32_t> rows, int64_t top_k, const T* weights, const T* y,
                         int64_t n_tokens, int64_t hidden, T* out) {
  std::fill_n(out, n_tokens * hidden, T(0));
  for (size_t r = 0; r < rows.size(); ++r) {
    const int32_t slot = rows[r];
    const T weight = weights[slot];
    T* o = out + (slot / top_k) * hidden;
    const T* yr = y + r * hidden;
    for (int64_t j = 0; j < hidden; ++j) o[j] += yr[j] * weight;
  }
}

template void combine_expert_rows<float>(std::span<const int32_t>, int64_t, const float*,
                                         const float*, int64_t, int64_t, float*);
template void combine_expert_rows<double>(std::span<const int32_t>, int64_t, const double*,
                                          const double*, int64_t, int64_t, double*);

namespace {

template <class Layer, class Slot>
Slot slot_of(Layer& l, const LayerLinear& ll) {
  switch (ll.role) {
    case LinearRole::kQ:
      return {&l.attn.wq, &l.attn.bq};
    case LinearRole::kK:
      return {&l.attn.wk, &l.attn.bk};
    case LinearRole::kV:
      return {&l.attn.wv, &l.attn.bv};
    case LinearRole::kO:
      return {&l.attn.wo, &l.attn.bo};
    default:
      break;
  }
  auto& mlp = ll.shared ? l.moe.shared : ll.expert >= 0 ? l.moe.experts[ll.expert] : l.mlp;
  if (ll.role == LinearRole::kGate) return {&mlp.gate, &mlp.b_gate};
  if (ll.role == LinearRole::kUp) return {&mlp.up, &mlp.b_up};
  return {&mlp.down, &mlp.b_down};
}

}  // namespace

LinearSlot linear_slot(DecoderLayerWeights& layer, const LayerLinear& l) {
  return slot_of<DecoderLayerWeights, LinearSlot>(layer, l);
}

ConstLinearSlot linear_slot(const DecoderLayerWeights& layer, const LayerLinear& l) {
  return slot_of<const DecoderLayerWeights, ConstLinearSlot>(layer, l);
}

Status moe_block(const ModelConfig& c, const MoeWeights& w, const float* h, int64_t n_tokens,
                 BlockScratch& s, float* out, ThreadPool& pool) {
  const MoeConfig& moe = c.moe;
  const int64_t hidden = c.hidden_size, n_experts = moe.n_experts, k = moe.top_k;
  const int64_t inter = moe.expert_intermediate, n_slots = n_tokens * k;
  ops::Backend& b = *s.backend;
  if (!b.host_addressable()) {
    return unimplemented("MoE layers on " + b.name() +
                         ": the router's choice and the expert gather run on the host, which "
                         "this backend's memory is not");
  }
  s.router_probs.resize(n_tokens * n_experts);
  s.routes.resize(n_slots);
  s.route_weights.resize(n_slots);
  const Tensor router = f32_view(w.router, n_experts, hidden);
  QS_RETURN_IF_ERROR(b.linear(h, n_tokens, router, nullptr, s.router_probs.data(), pool));
  route_top_k(moe, s.router_probs.data(), n_tokens, s.routes.data(), s.route_weights.data());

  // The slots sorted by expert, and their rows of h gathered in that order.
  sort_slots_by_expert(s.routes, n_experts, &s.expert_first, &s.expert_rows, &s.expert_next);
  QS_RETURN_IF_ERROR(s.expert_x.resize(b, n_slots * hidden));
  for (int64_t r = 0; r < n_slots; ++r) {
    std::copy_n(h + (s.expert_rows[r] / k) * hidden, hidden, s.expert_x.data() + r * hidden);
  }
  QS_RETURN_IF_ERROR(s.gate.resize(b, n_slots * inter));
  QS_RETURN_IF_ERROR(s.up.resize(b, n_slots * inter));
  QS_RETURN_IF_ERROR(s.expert_y.resize(b, n_slots * hidden));
  std::vector<ops::GroupedOut>& jobs = s.expert_jobs;
  jobs.clear();
  s.experts_read = 0;
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t r0 = s.expert_first[e], rows = s.expert_first[e + 1] - r0;
    if (rows == 0) continue;  // an expert nobody chose is not read
    ++s.experts_read;
    jobs.push_back({&w.experts[e].gate, nullptr, r0, rows, s.gate.data() + r0 * inter});
    jobs.push_back({&w.experts[e].up, nullptr, r0, rows, s.up.data() + r0 * inter});
  }
  QS_RETURN_IF_ERROR(b.linear_grouped(s.expert_x.data(), jobs, pool));
  b.silu_mul(s.gate.data(), s.up.data(), n_slots * inter, s.gate.data());
  jobs.clear();
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t r0 = s.expert_first[e], rows = s.expert_first[e + 1] - r0;
    if (rows == 0) continue;
    jobs.push_back({&w.experts[e].down, nullptr, r0, rows, s.expert_y.data() + r0 * hidden});
  }
  QS_RETURN_IF_ERROR(b.linear_grouped(s.gate.data(), jobs, pool));

  combine_expert_rows<float>(s.expert_rows, k, s.route_weights.data(), s.expert_y.data(), n_tokens,
                             hidden, out);
  if (w.shared.empty()) return ok_status();
  QS_RETURN_IF_ERROR(s.expert_y.resize(b, n_tokens * hidden));
  QS_RETURN_IF_ERROR(mlp_block(w.shared, h, n_tokens, s, s.expert_y.data(), pool));
  s.shared_gate.resize(n_tokens);
  const Tensor gate = f32_view(w.shared_gate, 1, hidden);
  QS_RETURN_IF_ERROR(b.linear(h, n_tokens, gate, nullptr, s.shared_gate.data(), pool));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float g = 1.0f / (1.0f + std::exp(-s.shared_gate[t]));
    float* o = out + t * hidden;
    const float* y = s.expert_y.data() + t * hidden;
    for (int64_t j = 0; j < hidden; ++j) o[j] += g * y[j];
  }
  return ok_status();
}

Status decoder_layer(const ModelConfig& c, const DecoderLayerWeights& w, float* x, int64_t n_tokens,
                     const float* cos, const float* sin, const ops::PagedKvLayer& cache,
                     std::span<const ops::AttentionSeq> seqs, BlockScratch& s, ThreadPool& pool,
                     dist::Communicator* tp) {
  ops::Backend& b = *s.backend;
  const int64_t n = n_tokens * c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  QS_RETURN_IF_ERROR(s.h.resize(b, n));
  QS_RETURN_IF_ERROR(s.delta.resize(b, n));
  b.rms_norm(x, n_tokens, c.hidden_size, param(s, w.attn_norm), eps, s.h.data());
  QS_RETURN_IF_ERROR(attention_block(c, w.attn, s.h.data(), n_tokens, cos, sin, cache, seqs, s,
                                     s.delta.data(), pool));
  if (tp != nullptr) QS_RETURN_IF_ERROR(tp->all_reduce_sum(s.delta.data(), n));
  b.add_inplace(x, s.delta.data(), n);
  b.rms_norm(x, n_tokens, c.hidden_size, param(s, w.mlp_norm), eps, s.h.data());
  if (w.sparse()) {
    QS_RETURN_IF_ERROR(moe_block(c, w.moe, s.h.data(), n_tokens, s, s.delta.data(), pool));
  } else {
    QS_RETURN_IF_ERROR(mlp_block(w.mlp, s.h.data(), n_tokens, s, s.delta.data(), pool));
  }
  if (tp != nullptr) QS_RETURN_IF_ERROR(tp->all_reduce_sum(s.delta.data(), n));
  b.add_inplace(x, s.delta.data(), n);
  return ok_status();
}

}  // namespace qs::models
