// quant: one decoder block (RMSNorm, q/k/v, optional Qwen3 q/k-norm, RoPE, causal GQA
// attention with padding mask, o_proj, residual, RMSNorm, then a SwiGLU MLP or a Mixture of
// Experts (f32 router, top-k, each routed expert's SwiGLU weighted by its probability, Qwen2-MoE's
// sigmoid-gated shared expert), residual) as a differentiable function of its input and its
// linear weights, for AutoRound's block reconstruction (autoround.md §1.4). The block's linears
// are models::layer_linears' list, the one the loader walks: a dense block has seven, an MoE
// block four plus three per expert (and three for a shared expert). Same math as models/blocks.cc,
// on owned buffers, with the activations the backward needs saved by the forward. Templated:
// float for tuning, double for the gradient tests.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/blocks.h"
#include "models/model_config.h"
#include "ops/gemm.h"

namespace qs::quant {

// Indices into a block's linears (models::layer_linears order): attention first, then the MLP
// group(s) of gate/up/down. A dense block's MLP is group 0 (kGateProj..kDownProj); an MoE
// block's expert e is group e and its shared expert group n_experts.
enum LinearIndex : int { kQProj, kKProj, kVProj, kOProj, kGateProj, kUpProj, kDownProj };
constexpr int kMlpGate = 0, kMlpUp = 1, kMlpDown = 2;
inline int mlp_linear(int64_t group, int which) {
  return kGateProj + static_cast<int>(3 * group) + which;
}

// One entry per linear of the block, in its linears' order.
template <class T>
using PerLinear = std::vector<T>;

// Everything of one decoder block as owned buffers of T (never the read-only checkpoint map).
template <class T>
struct BlockTensors {
  int64_t hidden = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-6;
  int64_t sliding_window = 0;                // 0 = full causal attention
  std::vector<T> attn_norm;                  // [hidden]
  std::vector<T> mlp_norm;                   // [hidden]
  std::vector<T> q_norm;                     // [head_dim] (Qwen3 q/k-norm) or empty
  std::vector<T> k_norm;                     // [head_dim] or empty
  std::vector<models::LayerLinear> linears;  // names and shapes; layer-relative names allowed
  PerLinear<std::vector<T>> w;               // [out, in] each
  PerLinear<std::vector<T>> bias;            // [out] each, or empty
  std::vector<T> inv_freq;  // [head_dim / 2] rotary frequencies (rope scaling applied)
  // Mixture of Experts (n_experts > 0): the router [n_experts, hidden] and, with a shared
  // expert, its gate [hidden]. Not tuned: the tools keep both 16-bit.
  models::MoeConfig moe;
  std::vector<T> router;
  std::vector<T> shared_gate;
  // How the float block rounds the products of its linears and attention: bf16 is the tool's
  // amp=True (bf16 autocast, its CPU default), f32 its --disable_amp. The router and the
  // shared-expert gate stay f32 (inference runs them so, and routing is what a rounding would
  // flip). The double block ignores it.
  ops::Products products = ops::Products::kF32;

  bool sparse() const { return moe.n_experts > 0; }
  bool has_shared() const { return sparse() && moe.shared_intermediate > 0; }
  int n_linears() const { return static_cast<int>(linears.size()); }
  int64_t out_features(int i) const { return linears[i].out; }
  int64_t in_features(int i) const { return linears[i].in; }
  // A PerLinear of n_linears() copies of `v`.
  template <class U>
  PerLinear<U> per_linear(const U& v = U()) const {
    return PerLinear<U>(linears.size(), v);
  }
};

// A dense block's seven linears with layer-relative names ("self_attn.q_proj", ...,
// "mlp.down_proj") at these dimensions: what tests and tools that build a block by hand use.
std::vector<models::LayerLinear> dense_linears(int64_t hidden, int64_t intermediate,
                                               int64_t n_heads, int64_t n_kv_heads,
                                               int64_t head_dim);

// Copies a loaded layer (dense f32/f16/bf16 weights) into owned f32 buffers; rope frequencies
// from models::rope_inv_freq (default, linear, llama3). Errors name the layer and the linear
// when a weight is already quantized or a shape disagrees with the config.
Result<BlockTensors<float>> copy_block(const models::DecoderLayerWeights& layer,
                                       const models::ModelConfig& config, int64_t layer_index);

// The saved activations of one forward, [tokens = n_seqs * seqlen, features] each.
template <class T>
struct BlockActivations {
  int64_t n_seqs = 0, seqlen = 0;
  std::vector<T> x, inv_rms1, h1;  // input, its norm
  std::vector<T> q_pre, k_pre;     // q/k projections before q/k-norm (Qwen3)
  std::vector<T> inv_rms_q, inv_rms_k;
  std::vector<T> q, k, v;           // after norm and RoPE: what attention saw
  std::vector<T> attn, lse;         // attention output, per-query log-sum-exp
  std::vector<T> x2, inv_rms2, h2;  // after the attention residual, its norm
  // MLP: act = silu(gate) * up. In an MoE block these are per slot, [tokens * top_k, inter],
  // the (token, choice) slots sorted by expert.
  std::vector<T> gate, up, act;
  std::vector<T> cos, sin;  // [seqlen, head_dim / 2] for positions 0..seqlen-1
  // MoE: router probabilities after softmax [tokens, n_experts]; the choices and their weights
  // [tokens, top_k]; slot_of_row [tokens * top_k]: which (token * top_k + choice) each
  // expert-sorted row holds, expert e's rows being [expert_first[e], expert_first[e + 1]);
  // their inputs (rows of h2) and unweighted expert outputs [tokens * top_k, hidden].
  std::vector<T> probs, route_w;
  std::vector<int32_t> routes, slot_of_row;
  std::vector<int64_t> expert_first;
  std::vector<T> expert_x, expert_y;
  // The shared expert: its SwiGLU [tokens, shared_inter], output [tokens, hidden] and gate
  // sigmoid [tokens].
  std::vector<T> s_gate, s_up, s_act, s_out, s_sig;
};

// y [n_seqs * seqlen, hidden] = block(x) with the linear weights `w` (pointers to [out, in],
// e.g. quantize-dequantized ones); mask [n_seqs, seqlen] (1 = real token, nullptr = all).
// Positions are 0..seqlen-1 in every sequence. Saves activations into `act` when non-null.
template <class T>
void block_forward(const BlockTensors<T>& b, const PerLinear<const T*>& w, const T* x,
                   int64_t n_seqs, int64_t seqlen, const uint8_t* mask, BlockActivations<T>* act,
                   T* y, ThreadPool& pool);

// The backward's work buffers (a dozen arrays of tokens x features, 250 MB for a batch of
// 8 x 512 tokens of a Qwen3-0.6B block), kept by a caller that runs many backwards so that they
// are allocated once: fresh pages each call cost the kernel's page zeroing, 6 % of a tuning run.
template <class T>
struct BlockBackwardScratch {
  std::vector<T> dact, dgate, dup, dh2, dx2, dattn, dq, dk, dv, dq_pre, dk_pre, dh1;
  std::vector<T> dexpert_y, dexpert_x, dprobs, ds_out;  // MoE
};

// From dL/dy, writes dL/dx (overwritten; may be nullptr, which also skips the q/k/v
// projections' input gradients: nothing upstream needs them) and adds dL/dW of each linear
// into dw[i] ([out, in]; nullptr skips it). `scratch` may be nullptr (local buffers). In an MoE
// block the forward's top-k choice is held fixed (it is piecewise constant in the input):
// gradients flow through each chosen expert and through its routing weight (softmax, and the
// renormalisation when norm_topk_prob) into the router logits and on to h2; an expert no token
// chose gets none.
template <class T>
void block_backward(const BlockTensors<T>& b, const PerLinear<const T*>& w,
                    const BlockActivations<T>& act, const uint8_t* mask, const T* dy, T* dx,
                    const PerLinear<T*>& dw, ThreadPool& pool,
                    BlockBackwardScratch<T>* scratch = nullptr);

}  // namespace qs::quant
