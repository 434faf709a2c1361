// quant: AutoRound's fake-quantized linear weight (autoround.md §1.1, §1.3): the trainable
// rounding offsets V and min/max scale coefficients alpha, beta of one nn.Linear, its
// quantize-dequantize forward W_q = s * (clamp(round(W/s + V) + zp, 0, 2^b - 1) - zp) in the
// tool's exact arithmetic (f16-rounded scale, 1e-5 floor, full-range symmetric with negative
// scales, asymmetric with a rounded zero point), the straight-through backward into V, alpha
// and beta, and the export of the result as a formats::QuantizedWeight.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/quantized_weight.h"

namespace qs::quant {

// One linear's tuning state. Groups are `group_size` consecutive input columns of a row (the
// last may be partial); group index = row * n_groups + column / group_size.
template <class T>
struct FakeQuantLinear {
  int64_t n = 0, k = 0;        // weight [n, k] as nn.Linear stores it
  int bits = 4;                // 2..8
  int64_t group_size = 0;      // resolved: k when the scheme says -1 (per channel); may exceed k
  int64_t n_groups = 0;        // ceil(k / group_size) per row
  bool sym = true;             // full-range symmetric (int_sym) vs asymmetric (int_asym)
  std::vector<T> w;            // [n, k] the full-precision weight (an owned copy)
  std::vector<T> wmin, wmax;   // [n * n_groups] min(0, min group), max(0, max group), cached once
  std::vector<T> v;            // [n, k] V, init 0
  std::vector<T> alpha, beta;  // [n * n_groups] max_scale / min_scale, init 1
};

// Copies w [n, k] and sets V = 0, alpha = beta = 1. group_size -1 = per channel; QS_CHECKs its
// arguments (bits in [2, 8], group_size -1 or > 0).
template <class T>
FakeQuantLinear<T> make_fake_quant(const T* w, int64_t n, int64_t k, int bits, int64_t group_size,
                                   bool sym);

// Straight-through rounding made explicit, for finite-difference checks of the backward: a
// recording forward (replay false) stores r = round(x) - x at every rounding site (the codes,
// the asymmetric zero point, the f16 cast of the scale) and which codes were inside the clamp
// range; a replaying forward uses x + r instead of round(x) and leaves a code that was inside
// unclamped. Rounded codes are integers, so many sit exactly on the clamp bounds, where torch's
// clamp passes the gradient (bounds inclusive); freezing that decision too makes the replayed
// forward the smooth function whose exact gradient the STE backward computes, so central
// differences of it must match qdq_backward.
template <class T>
struct FrozenRounding {
  bool replay = false;
  std::vector<T> code, zero, scale;  // [n * k], [n * n_groups], [n * n_groups]
  std::vector<uint8_t> inside;       // [n * k]
};

// What the backward and the export need from a forward.
template <class T>
struct QdqCache {
  std::vector<T> scale;          // [n * n_groups] s as used (f16 value, floored, signed)
  std::vector<T> zero;           // [n * n_groups] zp as used (2^(b-1) for sym)
  std::vector<uint8_t> floored;  // [n * n_groups] |s| hit the 1e-5 floor: no gradient to s
  std::vector<T> rounded;        // [n * k] round(W/s + V), before adding zp and clamping
};

// wq [n, k] = the quantize-dequantized weight for the current V, alpha, beta.
template <class T>
void qdq_forward(const FakeQuantLinear<T>& l, T* wq, QdqCache<T>* cache,
                 FrozenRounding<T>* frozen = nullptr);

// Given dL/dwq [n, k], writes dL/dV [n, k], dL/dalpha and dL/dbeta [n * n_groups] (overwritten):
// rounding passes gradients straight through, the clamp of the codes and the scale floor block
// them, and alpha/beta reach W_q through s (and through zp for asym), autoround.md §1.1.
template <class T>
void qdq_backward(const FakeQuantLinear<T>& l, const QdqCache<T>& cache, const T* dwq, T* dv,
                  T* dalpha, T* dbeta);

// The quantized weight the forward's cache describes: codes clamp(round(W/s + V) + zp), f16
// scales (exactly those the tuning used), zeros zp; dequantize() of it equals qdq_forward's wq.
formats::QuantizedWeight to_quantized_weight(const FakeQuantLinear<float>& l,
                                             const QdqCache<float>& cache);

}  // namespace qs::quant
