// kernels/cpu: the per-token ops written once in Google Highway's portable SIMD and compiled
// for each of its targets (foreach_target.h includes this file again per target), each with
// the semantics of its kernels/ref oracle. Tails go through the same vector code from a padded
// copy, so every element gets the same approximation. exp() is Cephes' polynomial, bit for bit
// exp_avx512.h's on the AVX-512 targets.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

// Zen 4 and Ice Lake onwards report Highway's AVX3_DL (AVX-512 with VNNI, VBMI2, ...); it is
// opt-in in Highway 1.0.3, and without it those CPUs would run the AVX3 code, which the
// tests then cover alone.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise_hwy.cc"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "core/check.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/hwy_targets.h"

HWY_BEFORE_NAMESPACE();
namespace qs::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// The last `count` (fewer than a vector) elements at p, the other lanes `pad`.
V load_tail(D d, const float* p, size_t count, float pad) {
  HWY_ALIGN float buf[kMaxLanes] = {};
  for (size_t i = 0; i < hn::Lanes(d); ++i) buf[i] = i < count ? p[i] : pad;
  return hn::Load(d, buf);
}

void store_tail(D d, V v, float* p, size_t count) {
  HWY_ALIGN float buf[kMaxLanes] = {};
  hn::Store(v, d, buf);
  for (size_t i = 0; i < count; ++i) p[i] = buf[i];
}

// e^x as Cephes' expf (rel. error ~2 ulp on [-87, 88]): e^x = 2^n e^r, n = round(x / ln 2),
// ln 2 split in two so that r is exact (Cody-Waite). On AVX-512 it is exp_avx512.h's, bit for
// bit: x clamped to [-104, 89], past which the f32 result is 0 or inf anyway, and 2^n applied
// by vscalefps. Elsewhere 2^n is built in the exponent field, which holds normal numbers only,
// so x is clamped to [-87, 88], as the hand-written AVX2 kernel did: below, the result is
// < 1.7e-38 instead of 0 (an absolute error no caller can see); above, only silu's e^-g for
// g < -88 is affected, where g / (1 + e) is ~0 either way. Applying 2^n in two halves
// (2^floor(n/2) 2^ceil(n/2)) gave the AVX-512 results on AVX2 too, but softmax and exp_sub
// then ran 7-9% slower than the hand-written AVX2 kernel (elementwise_bench, Zen 4).
// On x86, max/min return their second operand when either is NaN, so a NaN x passes the clamp
// and the result is NaN; elsewhere NaN is put back at the end (the emulated targets' max/min
// return the number).
HWY_INLINE V exp_v(D d, V x) {
#if HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86
  constexpr float kLo = -104.0f, kHi = 89.0f;
#else
  constexpr float kLo = -87.0f, kHi = 88.0f;
#endif
  V c = hn::Max(hn::Set(d, kLo), x);
  c = hn::Min(hn::Set(d, kHi), c);
  const V n = hn::Round(hn::Mul(c, hn::Set(d, 1.44269504088896341f)));
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), c);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  V p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(d, 1.0f)));
#if HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86
  return V{_mm512_scalef_ps(p.raw, n.raw)};
#else
  // n + 1.5 * 2^23 + 127 holds 0x4B400000 + n + 127 in its bits, exactly; shifted left by 23,
  // 0x4B400000 drops out and the biased exponent n + 127 of 2^n is left.
  const hn::RebindToSigned<D> di;
  const auto bits = hn::BitCast(di, hn::Add(n, hn::Set(d, 12583039.0f)));
  const V e = hn::Mul(p, hn::BitCast(d, hn::ShiftLeft<23>(bits)));
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
  return e;
#else
  return hn::IfThenElse(hn::IsNaN(x), x, e);
#endif
#endif
}

// erf(x) as XLA's f32 rational approximation x P(x^2) / Q(x^2) on [-4, 4] (outside, erf is
// +-1 in f32): within 4.2e-7 of erf, which keeps GELU within 1.4e-6 of the exact value for
// |x| <= 10 (libm's erff: 4.5e-7). Whisper's encoder runs 11M of these per 30 s window.
HWY_INLINE V erf_v(D d, V x) {
  x = hn::Max(hn::Set(d, -4.0f), hn::Min(hn::Set(d, 4.0f), x));
  const V x2 = hn::Mul(x, x);
  V p = hn::Set(d, -2.72614225801306e-10f);
  p = hn::MulAdd(p, x2, hn::Set(d, 2.77068142495902e-08f));
  p = hn::MulAdd(p, x2, hn::Set(d, -2.10102402082508e-06f));
  p = hn::MulAdd(p, x2, hn::Set(d, -5.69250639462346e-05f));
  p = hn::MulAdd(p, x2, hn::Set(d, -7.34990630326855e-04f));
  p = hn::MulAdd(p, x2, hn::Set(d, -2.95459980854025e-03f));
  p = hn::MulAdd(p, x2, hn::Set(d, -1.60960333262415e-02f));
  V q = hn::Set(d, -1.45660718464996e-05f);
  q = hn::MulAdd(q, x2, hn::Set(d, -2.13374055278905e-04f));
  q = hn::MulAdd(q, x2, hn::Set(d, -1.68282697438203e-03f));
  q = hn::MulAdd(q, x2, hn::Set(d, -7.37332916720468e-03f));
  q = hn::MulAdd(q, x2, hn::Set(d, -1.42647390514189e-02f));
  return hn::Div(hn::Mul(x, p), q);
}

HWY_INLINE V gelu_erf_v(D d, V v) {
  const V e = erf_v(d, hn::Mul(v, hn::Set(d, 0.70710678f)));
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), v), hn::Add(hn::Set(d, 1.0f), e));
}

HWY_INLINE V silu_mul_v(D d, V g, V up) {
  const V e = exp_v(d, hn::Neg(g));
  return hn::Mul(hn::Div(g, hn::Add(hn::Set(d, 1.0f), e)), up);
}

void GeluErf(float* x, int64_t n) {
  const D d;
  const size_t lanes = hn::Lanes(d), count = static_cast<size_t>(n);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) hn::StoreU(gelu_erf_v(d, hn::LoadU(d, x + i)), d, x + i);
  if (i < count)
    store_tail(d, gelu_erf_v(d, load_tail(d, x + i, count - i, 0.0f)), x + i, count - i);
}

// Sums of squares in two f32 accumulators (the oracle sums in double), the scale as the oracle.
void RmsNorm(const float* x, int64_t m, int64_t d_in, const float* weight, float eps, float* y) {
  const D d;
  const size_t lanes = hn::Lanes(d), dim = static_cast<size_t>(d_in);
  for (int64_t row = 0; row < m; ++row) {
    const float* xi = x + row * d_in;
    float* yi = y + row * d_in;
    V acc0 = hn::Zero(d), acc1 = hn::Zero(d);
    size_t j = 0;
    for (; j + 2 * lanes <= dim; j += 2 * lanes) {
      const V a = hn::LoadU(d, xi + j), b = hn::LoadU(d, xi + j + lanes);
      acc0 = hn::MulAdd(a, a, acc0);
      acc1 = hn::MulAdd(b, b, acc1);
    }
    for (; j + lanes <= dim; j += lanes) {
      const V a = hn::LoadU(d, xi + j);
      acc0 = hn::MulAdd(a, a, acc0);
    }
    if (j < dim) {
      const V a = load_tail(d, xi + j, dim - j, 0.0f);
      acc0 = hn::MulAdd(a, a, acc0);
    }
    const double ss = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
    const V inv = hn::Set(d, 1.0f / std::sqrt(static_cast<float>(ss / d_in) + eps));
    for (j = 0; j + lanes <= dim; j += lanes) {
      const V v = hn::Mul(hn::LoadU(d, xi + j), inv);
      hn::StoreU(hn::Mul(hn::LoadU(d, weight + j), v), d, yi + j);
    }
    if (j < dim) {
      const size_t rest = dim - j;
      const V v = hn::Mul(load_tail(d, xi + j, rest, 0.0f), inv);
      store_tail(d, hn::Mul(load_tail(d, weight + j, rest, 0.0f), v), yi + j, rest);
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const D d;
  const size_t lanes = hn::Lanes(d), count = static_cast<size_t>(n);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes)
    hn::StoreU(silu_mul_v(d, hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, out + i);
  if (i < count) {
    const size_t rest = count - i;
    const V v = silu_mul_v(d, load_tail(d, gate + i, rest, 0.0f), load_tail(d, up + i, rest, 0.0f));
    store_tail(d, v, out + i, rest);
  }
}

// x1 c - x2 s and x2 c + x1 s with one product fused: within one rounding of the oracle.
HWY_INLINE void rotate(D d, V c, V s, float* lo, float* hi) {
  const V x1 = hn::LoadU(d, lo), x2 = hn::LoadU(d, hi);
  hn::StoreU(hn::MulSub(x1, c, hn::Mul(x2, s)), d, lo);
  hn::StoreU(hn::MulAdd(x2, c, hn::Mul(x1, s)), d, hi);
}

// The last `rest` pairs of a head through the vector code.
HWY_NOINLINE void rotate_tail(const float* c, const float* s, float* lo, float* hi, size_t rest) {
  const D d;
  HWY_ALIGN float a[kMaxLanes] = {}, b[kMaxLanes] = {};
  hn::Store(load_tail(d, lo, rest, 0.0f), d, a);
  hn::Store(load_tail(d, hi, rest, 0.0f), d, b);
  rotate(d, load_tail(d, c, rest, 0.0f), load_tail(d, s, rest, 0.0f), a, b);
  for (size_t k = 0; k < rest; ++k) {
    lo[k] = a[k];
    hi[k] = b[k];
  }
}

// A token's heads share its cos and sin, so each vector of them is loaded once for all heads.
void RopeRotateHalf(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const float* cos,
                    const float* sin) {
  const D d;
  const size_t lanes = hn::Lanes(d), half = static_cast<size_t>(head_dim / 2);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos + t * static_cast<int64_t>(half);
    const float* s = sin + t * static_cast<int64_t>(half);
    float* token = x + t * n_heads * head_dim;
    size_t j = 0;
    for (; j + lanes <= half; j += lanes) {
      const V cj = hn::LoadU(d, c + j), sj = hn::LoadU(d, s + j);
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = token + h * head_dim;
        rotate(d, cj, sj, v + j, v + half + j);
      }
    }
    if (j < half) {
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = token + h * head_dim;
        rotate_tail(c + j, s + j, v + j, v + half + j, half - j);
      }
    }
  }
}

// exp(x - shift) of the elements, written to out when it is not null; returns their sum in
// f32 lanes. Lanes past the end count 0.
HWY_INLINE float exp_sub_sum(D d, const float* x, size_t count, V shift, float* out) {
  const size_t lanes = hn::Lanes(d);
  V sum = hn::Zero(d);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const V e = exp_v(d, hn::Sub(hn::LoadU(d, x + i), shift));
    if (out != nullptr) hn::StoreU(e, d, out + i);
    sum = hn::Add(sum, e);
  }
  if (i < count) {
    const size_t rest = count - i;
    const V e = exp_v(d, hn::Sub(load_tail(d, x + i, rest, 0.0f), shift));
    if (out != nullptr) store_tail(d, e, out + i, rest);
    sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(d, rest), e));
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

float ExpSub(const float* x, int64_t n, float shift, float* out) {
  const D d;
  return exp_sub_sum(d, x, static_cast<size_t>(n), hn::Set(d, shift), out);
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const D d;
  const size_t lanes = hn::Lanes(d), count = static_cast<size_t>(n);
  V mx = hn::Set(d, -INFINITY);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) mx = hn::Max(mx, hn::LoadU(d, x + i));
  if (i < count) mx = hn::Max(mx, load_tail(d, x + i, count - i, -INFINITY));
  const V max_v = hn::MaxOfLanes(d, mx);
  const V inv = hn::Set(d, 1.0f / exp_sub_sum(d, x, count, max_v, x));
  for (i = 0; i + lanes <= count; i += lanes)
    hn::StoreU(hn::Mul(hn::LoadU(d, x + i), inv), d, x + i);
  if (i < count)
    store_tail(d, hn::Mul(load_tail(d, x + i, count - i, 0.0f), inv), x + i, count - i);
}

void AddInplace(float* y, const float* x, int64_t n) {
  const D d;
  const size_t lanes = hn::Lanes(d), count = static_cast<size_t>(n);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes)
    hn::StoreU(hn::Add(hn::LoadU(d, y + i), hn::LoadU(d, x + i)), d, y + i);
  for (; i < count; ++i) y[i] += x[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace qs::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qs::kernels::cpu {

HWY_EXPORT(RmsNorm);
HWY_EXPORT(SiluMul);
HWY_EXPORT(RopeRotateHalf);
HWY_EXPORT(Softmax);
HWY_EXPORT(ExpSub);
HWY_EXPORT(AddInplace);
HWY_EXPORT(GeluErf);

namespace {

ElementwiseKernels kernels_of(int64_t target) {
  const size_t i = hwy_table_index(target);
  const ElementwiseKernels k = {
      HWY_DISPATCH_TABLE(RmsNorm)[i],        HWY_DISPATCH_TABLE(SiluMul)[i],
      HWY_DISPATCH_TABLE(RopeRotateHalf)[i], HWY_DISPATCH_TABLE(Softmax)[i],
      HWY_DISPATCH_TABLE(AddInplace)[i],     HWY_DISPATCH_TABLE(ExpSub)[i],
      HWY_DISPATCH_TABLE(GeluErf)[i]};
  QS_CHECK(k.rms_norm && k.silu_mul && k.rope_rotate_half && k.softmax && k.add_inplace &&
           k.exp_sub && k.gelu_erf);
  return k;
}

}  // namespace

std::vector<int64_t> elementwise_hwy_targets() {
  std::vector<int64_t> targets;
  for (int64_t rest = HWY_TARGETS; rest != 0; rest &= rest - 1) targets.push_back(rest & -rest);
  return targets;
}

const char* hwy_target_name(int64_t target) {
  return hwy::TargetName(target);
}

bool hwy_target_supported(int64_t target) {
  return (hwy::SupportedTargets() & target) != 0;
}

const ElementwiseKernels& elementwise_hwy(int64_t target) {
  static const HwyKernelTable<ElementwiseKernels> table = make_hwy_kernel_table(kernels_of);
  return hwy_kernels(table, target, "not a target elementwise_hwy.cc is compiled for");
}

int64_t elementwise_hwy_target(Isa isa) {
  // Lower bits are better targets; avx2 allows AVX2 and below.
  const int64_t ceiling = isa == Isa::kAvx2 ? HWY_AVX2 : 0;
  for (int64_t t : elementwise_hwy_targets()) {
    if (t >= ceiling && hwy_target_supported(t)) return t;
  }
  return HWY_STATIC_TARGET;
}

const ElementwiseKernels& elementwise_hwy_active() {
  static const ElementwiseKernels& k = elementwise_hwy(elementwise_hwy_target(active_isa()));
  return k;
}

}  // namespace qs::kernels::cpu
#endif  // HWY_ONCE
