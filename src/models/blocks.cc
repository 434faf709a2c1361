// models: shared decoder blocks (see blocks.h).
#include "models/blocks.h"

#include <cmath>

#include "ops/elementwise.h"
#include "ops/linear.h"

namespace qs::models {
namespace {

const float* bias_or_null(const std::vector<float>& b) {
  return b.empty() ? nullptr : b.data();
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

Status attention_block(const ModelConfig& c, const AttentionWeights& w, const float* h,
                       int64_t n_tokens, const float* cos, const float* sin,
                       const ops::PagedKvLayer& cache, std::span<const ops::AttentionSeq> seqs,
                       BlockScratch& s, float* out, ThreadPool& pool) {
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  s.q.resize(n_tokens * q_dim);
  s.k.resize(n_tokens * kv_dim);
  s.v.resize(n_tokens * kv_dim);
  s.attn.resize(n_tokens * q_dim);
  const ops::LinearOut qkv[] = {{&w.wq, bias_or_null(w.bq), s.q.data()},
                                {&w.wk, bias_or_null(w.bk), s.k.data()},
                                {&w.wv, bias_or_null(w.bv), s.v.data()}};
  QS_RETURN_IF_ERROR(ops::linear_many(h, n_tokens, qkv, pool));
  if (!w.q_norm.empty()) {
    // Qwen3: RMSNorm over head_dim of each head, before RoPE.
    const float eps = static_cast<float>(c.rms_norm_eps);
    ops::rms_norm(s.q.data(), n_tokens * c.n_heads, c.head_dim, w.q_norm.data(), eps, s.q.data());
    ops::rms_norm(s.k.data(), n_tokens * c.n_kv_heads, c.head_dim, w.k_norm.data(), eps,
                  s.k.data());
  }
  ops::rope_rotate_half(s.q.data(), n_tokens, c.n_heads, c.head_dim, cos, sin);
  ops::rope_rotate_half(s.k.data(), n_tokens, c.n_kv_heads, c.head_dim, cos, sin);
  ops::paged_kv_write(cache, seqs, s.k.data(), s.v.data());
  ops::AttentionParams params;
  params.n_heads = c.n_heads;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.sliding_window = w.sliding_window;
  QS_RETURN_IF_ERROR(ops::paged_attention(s.q.data(), cache, seqs, params, s.attn.data(), pool));
  return ops::linear(s.attn.data(), n_tokens, w.wo, bias_or_null(w.bo), out, pool);
}

Status mlp_block(const ModelConfig& c, const MlpWeights& w, const float* h, int64_t n_tokens,
                 BlockScratch& s, float* out, ThreadPool& pool) {
  s.gate.resize(n_tokens * c.intermediate_size);
  s.up.resize(n_tokens * c.intermediate_size);
  const ops::LinearOut gate_up[] = {{&w.gate, bias_or_null(w.b_gate), s.gate.data()},
                                    {&w.up, bias_or_null(w.b_up), s.up.data()}};
  QS_RETURN_IF_ERROR(ops::linear_many(h, n_tokens, gate_up, pool));
  ops::silu_mul(s.gate.data(), s.up.data(), n_tokens * c.intermediate_size, s.gate.data());
  return ops::linear(s.gate.data(), n_tokens, w.down, bias_or_null(w.b_down), out, pool);
}

Status decoder_layer(const ModelConfig& c, const DecoderLayerWeights& w, float* x, int64_t n_tokens,
                     const float* cos, const float* sin, const ops::PagedKvLayer& cache,
                     std::span<const ops::AttentionSeq> seqs, BlockScratch& s, ThreadPool& pool) {
  const int64_t n = n_tokens * c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  s.h.resize(n);
  s.delta.resize(n);
  ops::rms_norm(x, n_tokens, c.hidden_size, w.attn_norm.data(), eps, s.h.data());
  QS_RETURN_IF_ERROR(attention_block(c, w.attn, s.h.data(), n_tokens, cos, sin, cache, seqs, s,
                                     s.delta.data(), pool));
  ops::add_inplace(x, s.delta.data(), n);
  ops::rms_norm(x, n_tokens, c.hidden_size, w.mlp_norm.data(), eps, s.h.data());
  QS_RETURN_IF_ERROR(mlp_block(c, w.mlp, s.h.data(), n_tokens, s, s.delta.data(), pool));
  ops::add_inplace(x, s.delta.data(), n);
  return ok_status();
}

}  // namespace qs::models
