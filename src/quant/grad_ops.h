// quant: the decoder block's operations with a hand-written backward beside each forward, for
// AutoRound's block reconstruction (autoround.md §1.4). Templates over the scalar type: the
// tuner runs them in float (matmuls on ops' f32 kernels), the gradient tests run the same code
// in double (plain loops) to compare against central finite differences. Tensors are row-major
// [tokens, features] with tokens = n_seqs * seqlen; every buffer is owned by the caller.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "ops/gemm.h"

namespace qs::quant {

// C[m, n] (+)= A[m, k] * B[k, n], A(i, p) = a[i * a_rs + p * a_cs], B(p, j) = b[p * ldb + j],
// C(i, j) = c[i * ldc + j]. Float goes to ops::gemm (AVX-512/AVX2/ref) with `products` (bf16:
// the tool's autocast); double to plain loops, which ignore `products` (the gradient tests check
// the calculus, not the rounding). pool == nullptr runs on the calling thread.
template <class T>
struct MatMul {
  const T* a;
  int64_t a_rs, a_cs;
  const T* b;
  int64_t ldb;
  T* c;
  int64_t ldc;
  int64_t m, n, k;
  bool accumulate;
  ops::Products products = ops::Products::kF32;
};
template <class T>
void matmul(const MatMul<T>& g, ThreadPool* pool);

// y[m, n] = x[m, k] * w[n, k]^T + bias (bias [n] or nullptr). Float uses ops::linear (f32
// products) or ops::gemm with B = w^T (bf16 products); double ignores `products`.
template <class T>
void linear_forward(const T* x, int64_t m, int64_t k, const T* w, int64_t n, const T* bias, T* y,
                    ThreadPool& pool, ops::Products products = ops::Products::kF32);
// Its two definitions are explicit specializations (grad_ops.cc), declared here so that no
// caller instantiates the primary template, which has no body.
template <>
void linear_forward<float>(const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                           const float* bias, float* y, ThreadPool& pool, ops::Products products);
template <>
void linear_forward<double>(const double* x, int64_t m, int64_t k, const double* w, int64_t n,
                            const double* bias, double* y, ThreadPool& pool, ops::Products);
// dx[m, k] (+)= dy * w and dw[n, k] (+)= dy^T * x: `accumulate` adds into both (inputs shared
// by q/k/v and gate/up; weight gradients summed over accumulation steps). Either output may be
// nullptr. The bias is not trained.
template <class T>
void linear_backward(const T* x, const T* dy, int64_t m, int64_t k, const T* w, int64_t n, T* dx,
                     T* dw, bool accumulate, ThreadPool& pool,
                     ops::Products products = ops::Products::kF32);

// HF LlamaRMSNorm: y = x / sqrt(mean(x^2) + eps) * weight over rows of d; saves the inverse
// rms of each row in inv_rms[m] for the backward. y may alias x.
template <class T>
void rms_norm_forward(const T* x, int64_t m, int64_t d, const T* weight, double eps, T* y,
                      T* inv_rms);
// dx (+)= d/dx of <dy, y>: r * (w * dy) - r^3 / d * x * sum(w * dy * x). The norm weight is
// not trained (enable_norm_bias_tuning is off by default, autoround.md §1.1).
template <class T>
void rms_norm_backward(const T* x, const T* inv_rms, const T* dy, int64_t m, int64_t d,
                       const T* weight, T* dx, bool accumulate);

// Rotate-half RoPE in place (ops::rope_rotate_half's convention):
//   x [n_tokens, n_heads, head_dim]; cos, sin [n_tokens, head_dim / 2].
// The backward applies the transposed rotation to the gradient in place.
template <class T>
void rope_forward(T* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const T* cos,
                  const T* sin);
template <class T>
void rope_backward(T* dx, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const T* cos,
                   const T* sin);

// out = silu(gate) * up, and its backward into dgate and dup (out may alias neither input).
template <class T>
void silu_mul_forward(const T* gate, const T* up, int64_t n, T* out);
template <class T>
void silu_mul_backward(const T* gate, const T* up, const T* dout, int64_t n, T* dgate, T* dup);

// Causal GQA attention with a key padding mask and optional sliding window, as HF's eager
// attention: query i of a sequence attends to key j iff j <= i, mask[j] != 0 and (window == 0
// or j > i - window). A query with no such key (a padded position) outputs zeros.
struct AttentionShape {
  int64_t n_seqs = 0, seqlen = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t sliding_window = 0;
  double scale = 0;                              // 1 / sqrt(head_dim)
  ops::Products products = ops::Products::kF32;  // of Q K^T and P V (and their backward)
  // The forward of a float call with bf16 products, no mask and no window runs the fused kernel
  // (ops::causal_attention_bf16) where it runs; false keeps the per-block GEMMs, which tests
  // and benchmarks compare it with.
  bool fused_bf16 = true;
};
//   q [tokens, n_heads * head_dim]; k, v [tokens, n_kv_heads * head_dim]; mask [n_seqs, seqlen]
//   (nullptr: every position valid); out [tokens, n_heads * head_dim];
//   lse [n_seqs, n_heads, seqlen]: each query's log-sum-exp of scaled scores, saved so that
//   the backward recomputes the probabilities instead of storing seqlen^2 per head.
template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v,
                       const uint8_t* mask, T* out, T* lse, ThreadPool& pool);
// Gradients into q, k, v (overwritten) from dout, given the forward's inputs, out and lse.
template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v,
                        const uint8_t* mask, const T* out, const T* lse, const T* dout, T* dq,
                        T* dk, T* dv, ThreadPool& pool);

}  // namespace qs::quant
