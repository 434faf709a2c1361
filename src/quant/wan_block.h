// quant: one Wan2.x transformer block (diffusers' WanTransformerBlock) as a differentiable
// function of its input and its ten linears' weights, for AutoRound's block reconstruction
// (autoround.md §1.4) of Wan transformers: AdaLN-modulated LayerNorm, self-attention with q/k
// RMSNorm across heads and interleaved 3-D RoPE, gated residual, cross-attention to the text
// after norm2, tanh-GELU feed-forward, gated residual. The conditioning (timestep projection,
// embedded text, rope tables) is held fixed per sample. Same math as
// diffusion/wan_transformer.cc's block loop, with the activations the backward needs saved.
// Templated: float for tuning, double for the gradient tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/wan_transformer.h"
#include "models/component.h"
#include "quant/block.h"

namespace qs::quant {

// The block's linears in the order tuning and export use (names relative to "blocks.<i>.").
enum WanLinearIndex : int {
  kWanQ,
  kWanK,
  kWanV,
  kWanOut,
  kWanQ2,
  kWanK2,
  kWanV2,
  kWanOut2,
  kWanFfnIn,
  kWanFfnOut,
  kWanLinears
};
// "attn1.to_q", ..., "ffn.net.2".
const char* wan_linear_name(int i);

template <class T>
struct WanBlockTensors {
  int64_t dim = 0;  // inner dim = n_heads * head_dim
  int64_t n_heads = 0, head_dim = 0, ffn_dim = 0;
  double eps = 1e-6;
  bool cross_attn_norm = true;
  std::vector<T> scale_shift_table;  // [6, dim]
  std::vector<T> norm_q, norm_k;     // attn1 [dim]
  std::vector<T> norm_q2, norm_k2;   // attn2 [dim]
  std::vector<T> norm2_w, norm2_b;   // [dim] when cross_attn_norm
  PerLinear<std::vector<T>> w;       // kWanLinears: [out, in] each
  PerLinear<std::vector<T>> bias;    // kWanLinears: [out] each

  int n_linears() const { return kWanLinears; }
  int64_t out_features(int i) const { return i == kWanFfnIn ? ffn_dim : dim; }
  int64_t in_features(int i) const { return i == kWanFfnOut ? ffn_dim : dim; }
};

// What a block sees besides its hidden states, for one sample (views, owned by the caller):
//   timestep_proj [n_mod, 6 dim]: condition_embedder's time_proj output, one row (n_mod 1) or
//     one per token (n_mod = seq: Wan2.2 TI2V's expand_timesteps);
//   text [n_text, dim]: condition_embedder's text_embedder output;
//   cos, sin [seq, head_dim / 2]: the 3-D rope tables of the patch grid.
template <class T>
struct WanConditioning {
  int64_t seq = 0, n_text = 0, n_mod = 1;
  const T* timestep_proj = nullptr;
  const T* text = nullptr;
  const T* cos = nullptr;
  const T* sin = nullptr;
};

// The saved activations of one sample's forward.
template <class T>
struct WanBlockActivations {
  std::vector<T> mod;                             // [n_mod, 6 dim] table + timestep_proj
  std::vector<T> xhat1, inv1, nx;                 // norm1 (normalised, 1/std) and modulated
  std::vector<T> q_pre, k_pre, inv_q, inv_k;      // self-attn q/k before their RMSNorm
  std::vector<T> q, k, v, att, lse;               // after norm + rope; attention out, log-sum-exp
  std::vector<T> o;                               // to_out's output
  std::vector<T> x2, xhat2, inv2, n2;             // after the gated residual, norm2
  std::vector<T> q2_pre, k2_pre, inv_q2, inv_k2;  // cross-attn q (tokens) and k (text)
  std::vector<T> q2, k2, v2, att2, lse2;          //
  std::vector<T> x3, xhat3, inv3, n3;             // after the cross residual, norm3 modulated
  std::vector<T> h, g, f;                         // ffn in (pre-GELU), GELU, ffn out
};

// y [seq, dim] = block(x [seq, dim]) for one sample with linear weights `w` ([out, in] each).
template <class T>
void wan_block_forward(const WanBlockTensors<T>& b, const PerLinear<const T*>& w,
                       const WanConditioning<T>& c, const T* x, WanBlockActivations<T>* act, T* y,
                       ThreadPool& pool);

// From dL/dy: dL/dx into dx (overwritten; nullptr skips it) and dL/dW of each linear added into
// dw[i] (nullptr skips it). The norms' weights, biases and the conditioning are not trained.
template <class T>
void wan_block_backward(const WanBlockTensors<T>& b, const PerLinear<const T*>& w,
                        const WanConditioning<T>& c, const WanBlockActivations<T>& act, const T* dy,
                        T* dx, const PerLinear<T*>& dw, ThreadPool& pool);

// Checks a block's shapes (names `where` in errors).
Status check_wan_block(const WanBlockTensors<float>& b, const std::string& where);

// Block `index` of a Wan transformer directory's weights as owned f32 buffers (16-bit or f32
// sources). Errors name the tensor when one is missing, misshapen or already quantized.
Result<WanBlockTensors<float>> load_wan_block(const models::Component& c,
                                              const diffusion::WanTransformerConfig& config,
                                              int64_t index);

}  // namespace qs::quant
