// kernels/cpu: fused causal self-attention with bf16 products (attention_bf16_avx512.cc), the
// quantizer's calibration forward: softmax(scale Q K^T) V with Q, K, V rounded to bf16 (nearest
// even), P rounded to bf16 before P V, every sum in f32, as torch's attention under bf16
// autocast. One call runs one (sequence, kv head): K and V are converted once into the pair
// layouts vdpbf16ps multiplies and reused by every query head of the group. Trusts its
// arguments like every kernel; ops::causal_attention_bf16 checks them.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace qs::kernels::cpu {

// head_dim must be even and at most this (the key panels are head_dim / 2 pair steps deep).
constexpr int64_t kCausalAttentionBf16MaxHeadDim = 256;

// One sequence and kv head. Query i attends to keys 0..i.
struct CausalAttentionBf16Args {
  const float* q;  // [seqlen, q_ld]: head t of the group at q + t * head_dim, head_dim wide
  int64_t q_ld;
  const float* k;  // [seqlen, kv_ld], head_dim wide
  const float* v;  // [seqlen, kv_ld], head_dim wide
  int64_t kv_ld;
  float* out;  // [seqlen, out_ld]: like q; each row normalised
  int64_t out_ld;
  float* lse;  // [group, seqlen]: log-sum-exp of each query's scaled scores
  int64_t seqlen, group, head_dim;
  float scale;  // K is multiplied by it (in f32) before its rounding, as ops::gemm's callers do
};

#if QS_X86
// AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16) and AVX512-BW (the pair interleave).
bool causal_attention_bf16_avx512_supported();
// Bytes of scratch one call needs (64-byte aligned inside; the caller's, per thread).
int64_t causal_attention_bf16_avx512_scratch_bytes(int64_t seqlen, int64_t head_dim);
void causal_attention_bf16_avx512(const CausalAttentionBf16Args& a, void* scratch);
#endif

}  // namespace qs::kernels::cpu
