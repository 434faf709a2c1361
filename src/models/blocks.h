// models: the shared building blocks of the decoder families: RoPE tables, the attention
// block (q/k/v projections, optional q/k-norm, RoPE, paged GQA attention, o projection), the
// SwiGLU MLP block and the Mixture-of-Experts block built from it. They work on a whole batch of
// tokens at once, in f32, and name no weight format and no device: every op goes through the
// scratch's backend (ops/backend.h), matmuls with m = number of tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "models/model_config.h"
#include "ops/attention.h"
#include "ops/backend.h"
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
  bool empty() const { return gate.empty(); }
};

// The sparse MLP of an MoE layer (ModelConfig::moe).
struct MoeWeights {
  std::vector<float> router;        // [n_experts, hidden], f32 whatever the checkpoint stores
  std::vector<MlpWeights> experts;  // [n_experts], each [expert_intermediate] columns
  MlpWeights shared;                // Qwen2-MoE's shared expert; empty when there is none
  std::vector<float> shared_gate;   // [hidden]: sigmoid(h . shared_gate) scales `shared`
};

struct DecoderLayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  AttentionWeights attn;
  std::vector<float> mlp_norm;  // [hidden]
  MlpWeights mlp;               // dense layers
  MoeWeights moe;               // MoE layers (moe.experts not empty)
  bool sparse() const { return !moe.experts.empty(); }
};

// Where the LayerLinear `l` (layer_linears' entry of this layer) lives in a loaded layer: its
// weight and its bias (an empty vector when it has none). The layer's experts must be sized
// (moe.experts has n_experts entries) for an expert's slot.
struct LinearSlot {
  ops::LinearWeight* weight = nullptr;
  std::vector<float>* bias = nullptr;
};
LinearSlot linear_slot(DecoderLayerWeights& layer, const LayerLinear& l);
struct ConstLinearSlot {
  const ops::LinearWeight* weight = nullptr;
  const std::vector<float>* bias = nullptr;
};
ConstLinearSlot linear_slot(const DecoderLayerWeights& layer, const LayerLinear& l);

// cos/sin of position * inv_freq for each token: cos, sin [n_tokens, inv_freq.size()].
// Computed in f32 like transformers' rotary embedding (freqs = inv_freq * position in f32).
void rope_tables(std::span<const float> inv_freq, std::span<const int32_t> positions,
                 std::vector<float>* cos, std::vector<float>* sin);

// The same under multimodal RoPE: frequency j is turned by axis a(j) of the token's 3-D
// position, the axes taking `section` frequencies each in order (temporal, height, width), as
// transformers' apply_multimodal_rotary_pos_emb. positions3: axis-major [3 * n_tokens].
void rope_tables_mrope(std::span<const float> inv_freq, std::span<const int64_t> section,
                       std::span<const int32_t> positions3, int64_t n_tokens,
                       std::vector<float>* cos, std::vector<float>* sin);

// Scratch buffers reused by every layer of one forward call, on the backend the blocks run on
// (the CPU unless the model says otherwise); weights and pointers handed to the blocks are
// that backend's too.
struct BlockScratch {
  ops::Backend* backend = &ops::cpu_backend();
  ops::DeviceArray<float> q, k, v, attn;  // [n_tokens, n_heads|n_kv_heads * head_dim]
  ops::DeviceArray<float> gate, up;       // [n_tokens, intermediate]
  ops::DeviceArray<float> h, delta;       // [n_tokens, hidden]: a norm's output, a block's output
  // MoE: router probabilities [n_tokens, n_experts]; the chosen experts and their weights
  // [n_tokens, top_k] (left here after each MoE layer, for callers that trace routing); the
  // (token, choice) slots sorted by expert, with each expert's first row, and the gathered
  // rows and their outputs [n_tokens * top_k, hidden]. The router's choice is made on the host,
  // so MoE layers run on host-addressable backends only (for now).
  std::vector<float> router_probs;
  std::vector<int32_t> routes;
  std::vector<float> route_weights;
  std::vector<int32_t> expert_rows;
  std::vector<int64_t> expert_first, expert_next;
  std::vector<ops::GroupedOut> expert_jobs;
  ops::DeviceArray<float> expert_x, expert_y;
  std::vector<float> shared_gate;
  int64_t experts_read = 0;  // distinct experts the last MoE layer ran
};

// out = o_proj(attention(rope(norm(q_proj h)), rope(norm(k_proj h)), v_proj h)), writing the
// new tokens' K/V into `cache` first.
//   h, out: [n_tokens, hidden]; cos, sin: [n_tokens, head_dim / 2].
Status attention_block(const ModelConfig& config, const AttentionWeights& w, const float* h,
                       int64_t n_tokens, const float* cos, const float* sin,
                       const ops::PagedKvLayer& cache, std::span<const ops::AttentionSeq> seqs,
                       BlockScratch& scratch, float* out, ThreadPool& pool);

// out = down(silu(gate h) * up h).   h, out: [n_tokens, hidden]; the width is w.gate's.
Status mlp_block(const MlpWeights& w, const float* h, int64_t n_tokens, BlockScratch& scratch,
                 float* out, ThreadPool& pool);

// The router's choice for each token, as transformers makes it: softmax over the f32 logits,
// the top_k largest probabilities (ties to the lower expert id), renormalised to sum 1 when
// norm_topk_prob.   probs: [n_tokens, n_experts] (the logits, softmaxed in place);
// routes, weights: [n_tokens, top_k], largest first.
// The quantizer's differentiable block runs the same function, in double for its gradient tests.
template <class T>
void route_top_k(const MoeConfig& moe, T* probs, int64_t n_tokens, int32_t* routes, T* weights);

// The (token, choice) slots of `routes` [n_slots] sorted by expert, a counting sort stable in
// token order: expert e owns rows [(*first)[e], (*first)[e + 1]) of *rows, row r holding slot
// (*rows)[r] = token * top_k + choice. `next` is scratch.
void sort_slots_by_expert(std::span<const int32_t> routes, int64_t n_experts,
                          std::vector<int64_t>* first, std::vector<int32_t>* rows,
                          std::vector<int64_t>* next);

// out [n_tokens, hidden] = for each token the sum of its slots' expert outputs y [n_slots,
// hidden] (in rows' expert-sorted order) times their routing weights [n_slots]. Experts add in
// ascending order, as transformers' index_add_ loop does, so that the sums round the same way.
template <class T>
void combine_expert_rows(std::span<const int32_t> rows, int64_t top_k, const T* weights, const T* y,
                         int64_t n_tokens, int64_t hidden, T* out);

// out = sum over each token's top_k experts of weight * expert(h), plus Qwen2-MoE's
// sigmoid-gated shared expert. Tokens are grouped by expert, so each chosen expert's weights
// are read once per call however many tokens chose it, and experts nobody chose not at all.
//   h, out: [n_tokens, hidden]; scratch.routes / route_weights hold the choices afterwards.
Status moe_block(const ModelConfig& config, const MoeWeights& w, const float* h, int64_t n_tokens,
                 BlockScratch& scratch, float* out, ThreadPool& pool);

// One decoder layer on the residual stream x [n_tokens, hidden], in place (pre-norm):
// x += attention_block(rms_norm(x)); x += mlp_block or moe_block(rms_norm(x)). Model::forward runs
// it for every layer; the quantizer's block forward (quant/block.h) is tested against it.
// With a tensor-parallel group `tp`, `config` and `w` are this rank's shard
// (models/tensor_parallel.h) and each block's output is all-reduced before it is added.
Status decoder_layer(const ModelConfig& config, const DecoderLayerWeights& w, float* x,
                     int64_t n_tokens, const float* cos, const float* sin,
                     const ops::PagedKvLayer& cache, std::span<const ops::AttentionSeq> seqs,
                     BlockScratch& scratch, ThreadPool& pool, dist::Communicator* tp = nullptr);

}  // namespace qs::models
