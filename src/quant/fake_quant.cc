// quant: fake-quantized linear weight (fake_quant.h).
#include "quant/fake_quant.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/dtype.h"

namespace qs::quant {
namespace {

// AutoRound's q_scale_thresh for f16 scales, applied after the f16 cast (so it is itself an
// f16 value), as formats/rtn.cc.
float scale_floor() {
  return f16_to_f32(f32_to_f16(1e-5f));
}

// round(x) half to even like torch.round, or x + r with r recorded / replayed.
template <class T>
T round_site(T x, FrozenRounding<T>* frozen, std::vector<T> FrozenRounding<T>::*site, size_t i) {
  if (frozen == nullptr) return std::nearbyint(x);
  std::vector<T>& r = frozen->*site;
  if (frozen->replay) return x + r[i];
  const T y = std::nearbyint(x);
  r[i] = y - x;
  return y;
}

// The f16 cast of the scale (scale_dtype, §1.3), straight-through like torch's .to().
template <class T>
T f16_site(T x, FrozenRounding<T>* frozen, size_t i) {
  const T y = static_cast<T>(f16_to_f32(f32_to_f16(static_cast<float>(x))));
  if (frozen == nullptr) return y;
  if (frozen->replay) return x + frozen->scale[i];
  frozen->scale[i] = y - x;
  return y;
}

}  // namespace

template <class T>
FakeQuantLinear<T> make_fake_quant(const T* w, int64_t n, int64_t k, int bits, int64_t group_size,
                                   bool sym) {
  QS_CHECK(n > 0 && k > 0);
  QS_CHECK(bits >= 2 && bits <= 8);
  QS_CHECK(group_size == -1 || group_size > 0);
  FakeQuantLinear<T> l;
  l.n = n;
  l.k = k;
  l.bits = bits;
  l.sym = sym;
  l.group_size = group_size > 0 ? group_size : k;  // > k: the whole row is one group (§1.2)
  l.n_groups = (k + l.group_size - 1) / l.group_size;
  l.w.assign(w, w + n * k);
  l.v.assign(n * k, T(0));
  l.alpha.assign(n * l.n_groups, T(1));
  l.beta.assign(n * l.n_groups, T(1));
  l.wmin.assign(n * l.n_groups, T(0));
  l.wmax.assign(n * l.n_groups, T(0));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int64_t g = r * l.n_groups + c / l.group_size;
      l.wmin[g] = std::min(l.wmin[g], w[r * k + c]);
      l.wmax[g] = std::max(l.wmax[g], w[r * k + c]);
    }
  }
  return l;
}

template <class T>
void qdq_forward(const FakeQuantLinear<T>& l, T* wq, QdqCache<T>* cache,
                 FrozenRounding<T>* frozen) {
  const int64_t groups = l.n * l.n_groups;
  const T half = static_cast<T>(1 << (l.bits - 1)), maxq = static_cast<T>((1 << l.bits) - 1);
  const T floor_s = static_cast<T>(scale_floor());
  cache->scale.resize(groups);
  cache->zero.resize(groups);
  cache->floored.resize(groups);
  cache->rounded.resize(l.n * l.k);
  if (frozen != nullptr && !frozen->replay) {
    frozen->code.resize(l.n * l.k);
    frozen->zero.resize(groups);
    frozen->scale.resize(groups);
    frozen->inside.resize(l.n * l.k);
  }
  for (int64_t g = 0; g < groups; ++g) {
    T raw;
    if (l.sym) {
      // Full range: the larger of |wmin| beta and wmax alpha maps to -2^(b-1), so the scale is
      // negative when the positive side is larger (ties too), §1.3.
      const T a = -l.wmin[g] * l.beta[g], b = l.wmax[g] * l.alpha[g];
      raw = (a > b ? a : -b) / half;
    } else {
      raw = (l.wmax[g] * l.alpha[g] - l.wmin[g] * l.beta[g]) / maxq;
    }
    T s = f16_site(raw, frozen, g);
    bool floored = false;
    if (s < 0 && s > -floor_s) s = -floor_s, floored = true;
    if (s >= 0 && s < floor_s) s = floor_s, floored = true;
    cache->scale[g] = s;
    cache->floored[g] = floored;
    // Asym zp = round(-wmin beta / s), not clamped (int.py quant_tensor_asym).
    cache->zero[g] =
        l.sym ? half : round_site(-l.wmin[g] * l.beta[g] / s, frozen, &FrozenRounding<T>::zero, g);
  }
  for (int64_t r = 0; r < l.n; ++r) {
    for (int64_t c = 0; c < l.k; ++c) {
      const int64_t e = r * l.k + c, g = r * l.n_groups + c / l.group_size;
      const T s = cache->scale[g], zp = cache->zero[g];
      const T q = round_site(l.w[e] / s + l.v[e], frozen, &FrozenRounding<T>::code, e);
      cache->rounded[e] = q;
      T code = std::clamp(q + zp, T(0), maxq);
      if (frozen != nullptr && frozen->replay && frozen->inside[e]) code = q + zp;
      if (frozen != nullptr && !frozen->replay) frozen->inside[e] = q + zp >= 0 && q + zp <= maxq;
      wq[e] = s * (code - zp);
    }
  }
}

template <class T>
void qdq_backward(const FakeQuantLinear<T>& l, const QdqCache<T>& cache, const T* dwq, T* dv,
                  T* dalpha, T* dbeta) {
  const T half = static_cast<T>(1 << (l.bits - 1)), maxq = static_cast<T>((1 << l.bits) - 1);
  for (int64_t r = 0; r < l.n; ++r) {
    for (int64_t gi = 0; gi < l.n_groups; ++gi) {
      const int64_t g = r * l.n_groups + gi;
      const T s = cache.scale[g], zp = cache.zero[g];
      const int64_t c0 = gi * l.group_size, c1 = std::min(l.k, c0 + l.group_size);
      T ds = 0, dzp = 0;
      for (int64_t e = r * l.k + c0; e < r * l.k + c1; ++e) {
        const T q = cache.rounded[e] + zp;
        const bool inside = q >= 0 && q <= maxq;
        const T grad = dwq[e];
        // W_q = s (clamp(q) - zp): through the clamped code and, inside the range, through
        // u = W/s + V (du/ds = -W/s^2, du/dV = 1).
        dv[e] = inside ? grad * s : T(0);
        ds += grad * ((std::clamp(q, T(0), maxq) - zp) - (inside ? l.w[e] / s : T(0)));
        dzp += inside ? T(0) : -grad * s;
      }
      T da = 0, db = 0;
      if (!l.sym) {
        // zp = round(-wmin beta / s): dzp/ds = wmin beta / s^2, dzp/dbeta = -wmin / s.
        ds += dzp * l.wmin[g] * l.beta[g] / (s * s);
        db += dzp * -l.wmin[g] / s;
      }
      if (!cache.floored[g]) {
        if (l.sym) {
          const T a = -l.wmin[g] * l.beta[g], b = l.wmax[g] * l.alpha[g];
          if (a > b) {
            db += ds * -l.wmin[g] / half;
          } else {
            da += ds * -l.wmax[g] / half;
          }
        } else {
          da += ds * l.wmax[g] / maxq;
          db += ds * -l.wmin[g] / maxq;
        }
      }
      dalpha[g] = da;
      dbeta[g] = db;
    }
  }
}

formats::QuantizedWeight to_quantized_weight(const FakeQuantLinear<float>& l,
                                             const QdqCache<float>& cache) {
  formats::QuantizedWeight q;
  q.n = l.n;
  q.k = l.k;
  q.bits = l.bits;
  q.code_type = formats::CodeType::kUint;
  q.group_size = l.group_size;
  q.scale_dtype = DType::kF16;
  const float maxq = static_cast<float>((1 << l.bits) - 1);
  q.scales = cache.scale;
  q.zeros.resize(cache.zero.size());
  // zp lies in [0, maxq] by construction (-wmin beta <= wmax alpha - wmin beta); the clamp
  // only guards the representable range.
  for (size_t g = 0; g < cache.zero.size(); ++g)
    q.zeros[g] = static_cast<int32_t>(std::clamp(cache.zero[g], 0.0f, maxq));
  q.codes.resize(l.n * l.k);
  for (int64_t r = 0; r < l.n; ++r) {
    for (int64_t c = 0; c < l.k; ++c) {
      const int64_t e = r * l.k + c;
      const float zp = static_cast<float>(q.zeros[r * l.n_groups + c / l.group_size]);
      q.codes[e] = static_cast<uint8_t>(std::clamp(cache.rounded[e] + zp, 0.0f, maxq));
    }
  }
  return q;
}

template FakeQuantLinear<float> make_fake_quant<float>(const float*, int64_t, int64_t, int, int64_t,
                                                       bool);
template FakeQuantLinear<double> make_fake_quant<double>(const double*, int64_t, int64_t, int,
                                                         int64_t, bool);
template void qdq_forward<float>(const FakeQuantLinear<float>&, float*, QdqCache<float>*,
                                 FrozenRounding<float>*);
template void qdq_forward<double>(const FakeQuantLinear<double>&, double*, QdqCache<double>*,
                                  FrozenRounding<double>*);
template void qdq_backward<float>(const FakeQuantLinear<float>&, const QdqCache<float>&,
                                  const float*, float*, float*, float*);
template void qdq_backward<double>(const FakeQuantLinear<double>&, const QdqCache<double>&,
                                   const double*, double*, double*, double*);

}  // namespace qs::quant
