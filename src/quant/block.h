// quant: one decoder block (RMSNorm, q/k/v, optional Qwen3 q/k-norm, RoPE, causal GQA
// attention with padding mask, o_proj, residual, RMSNorm, SwiGLU MLP, residual) as a
// differentiable function of its input and its seven linear weights, for AutoRound's block
// reconstruction (autoround.md §1.4). Same math as models/blocks.cc, on owned buffers, with the
// activations the backward needs saved by the forward. Templated: float for tuning, double for
// the gradient tests.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/blocks.h"
#include "models/model_config.h"

namespace qs::quant {

// The block's linears in a fixed order; names as in HF checkpoints under model.layers.<i>.
enum LinearIndex : int { kQProj, kKProj, kVProj, kOProj, kGateProj, kUpProj, kDownProj };
constexpr int kNumLinears = 7;
const char* linear_name(int index);  // "self_attn.q_proj", ..., "mlp.down_proj"

template <class T>
using PerLinear = std::array<T, kNumLinears>;

// Everything of one decoder block as owned buffers of T (never the read-only checkpoint map).
template <class T>
struct BlockTensors {
  int64_t hidden = 0, intermediate = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-6;
  int64_t sliding_window = 0;   // 0 = full causal attention
  std::vector<T> attn_norm;     // [hidden]
  std::vector<T> mlp_norm;      // [hidden]
  std::vector<T> q_norm;        // [head_dim] (Qwen3 q/k-norm) or empty
  std::vector<T> k_norm;        // [head_dim] or empty
  PerLinear<std::vector<T>> w;  // [out, in] each: q [H*hd, hidden], k/v [Hkv*hd, hidden],
                                // o [hidden, H*hd], gate/up [inter, hidden], down [hidden, inter]
  PerLinear<std::vector<T>> bias;  // [out] each, or empty
  std::vector<T> inv_freq;         // [head_dim / 2] rotary frequencies (rope scaling applied)

  int64_t out_features(int i) const;
  int64_t in_features(int i) const;
};

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
  std::vector<T> gate, up, act;     // MLP: act = silu(gate) * up
  std::vector<T> cos, sin;          // [seqlen, head_dim / 2] for positions 0..seqlen-1
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
};

// From dL/dy, writes dL/dx (overwritten; may be nullptr, which also skips the q/k/v
// projections' input gradients: nothing upstream needs them) and adds dL/dW of each linear
// into dw[i] ([out, in]; nullptr skips it). `scratch` may be nullptr (local buffers).
template <class T>
void block_backward(const BlockTensors<T>& b, const PerLinear<const T*>& w,
                    const BlockActivations<T>& act, const uint8_t* mask, const T* dy, T* dx,
                    const PerLinear<T*>& dw, ThreadPool& pool,
                    BlockBackwardScratch<T>* scratch = nullptr);

}  // namespace qs::quant
