// models: the shared building blocks of the decoder families: RoPE tables, the attention
// block (q/k/v projections, optional q/k-norm, RoPE, paged GQA attention, o projection) and
// the SwiGLU MLP block. They work on a whole batch of tokens at once, in f32, and name no
// weight format: matmuls go through ops::linear with m = number of tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "ops/attention.h"
#include "ops/linear.h"

namespace qs::models {

// Biases and norm weights are converted to f32 at load; an empty vector means "none".
struct AttentionWeights {
  ops::LinearWeight wq;           // [n_heads * head_dim, hidden]
  ops::LinearWeight wk;           // [n_kv_heads * head_dim, hidden]
  ops::LinearWeight wv;           // [n_kv_heads * head_dim, hidden]
  ops::LinearWeight wo;           // [hidden, n_heads * head_dim]
  std::vector<float> bq, bk, bv;  // [n_heads * head_dim], [n_kv_heads * head_dim] x2
  std::vector<float> bo;          // [hidden]
  std::vector<float> q_norm;      // [head_dim] (Qwen3)
  std::vector<float> k_norm;      // [head_dim] (Qwen3)
  int64_t sliding_window = 0;     // 0 = full causal attention
};

struct MlpWeights {
  ops::LinearWeight gate;           // [intermediate, hidden]
  ops::LinearWeight up;             // [intermediate, hidden]
  ops::LinearWeight down;           // [hidden, intermediate]
  std::vector<float> b_gate, b_up;  // [intermediate]
  std::vector<float> b_down;        // [hidden]
};

struct DecoderLayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  AttentionWeights attn;
  std::vector<float> mlp_norm;  // [hidden]
  MlpWeights mlp;
};

// cos/sin of position * inv_freq for each token: cos, sin [n_tokens, inv_freq.size()].
// Computed in f32 like transformers' rotary embedding (freqs = inv_freq * position in f32).
void rope_tables(std::span<const float> inv_freq, std::span<const int32_t> positions,
                 std::vector<float>* cos, std::vector<float>* sin);

// Scratch buffers reused by every layer of one forward call.
struct BlockScratch {
  std::vector<float> q, k, v, attn;  // [n_tokens, n_heads|n_kv_heads * head_dim]
  std::vector<float> gate, up;       // [n_tokens, intermediate]
  std::vector<float> h, delta;       // [n_tokens, hidden]: a norm's output, a block's output
};

// out = o_proj(attention(rope(norm(q_proj h)), rope(norm(k_proj h)), v_proj h)), writing the
// new tokens' K/V into `cache` first.
//   h, out: [n_tokens, hidden]; cos, sin: [n_tokens, head_dim / 2].
Status attention_block(const ModelConfig& config, const AttentionWeights& w, const float* h,
                       int64_t n_tokens, const float* cos, const float* sin,
                       const ops::PagedKvLayer& cache, std::span<const ops::AttentionSeq> seqs,
                       BlockScratch& scratch, float* out, ThreadPool& pool);

// out = down(silu(gate h) * up h).   h, out: [n_tokens, hidden].
Status mlp_block(const ModelConfig& config, const MlpWeights& w, const float* h, int64_t n_tokens,
                 BlockScratch& scratch, float* out, ThreadPool& pool);

// One decoder layer on the residual stream x [n_tokens, hidden], in place (pre-norm):
// x += attention_block(rms_norm(x)); x += mlp_block(rms_norm(x)). Model::forward runs it for
// every layer; the quantizer's block forward (quant/block.h) is tested against it.
Status decoder_layer(const ModelConfig& config, const DecoderLayerWeights& w, float* x,
                     int64_t n_tokens, const float* cos, const float* sin,
                     const ops::PagedKvLayer& cache, std::span<const ops::AttentionSeq> seqs,
                     BlockScratch& scratch, ThreadPool& pool);

}  // namespace qs::models
