// formats: AutoRound's RTN quantizer (rtn.h).
#include "formats/rtn.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace qs::formats {
namespace {

// AutoRound's q_scale_thresh for f16 scales: keeps all-zero groups from dividing by zero.
constexpr float kScaleFloor = 1e-5f;

float to_f16(float v) {
  return f16_to_f32(f32_to_f16(v));
}

}  // namespace

QuantizedWeight rtn_quantize(const float* w, int64_t n, int64_t k, int bits, int64_t group_size,
                             bool sym) {
  QS_CHECK(n > 0 && k > 0);
  QS_CHECK(bits >= 2 && bits <= 8);
  QS_CHECK(group_size == -1 || group_size > 0);
  QuantizedWeight q;
  q.n = n;
  q.k = k;
  q.bits = bits;
  q.code_type = CodeType::kUint;
  q.group_size = group_size > 0 ? group_size : k;
  q.scale_dtype = DType::kF16;
  const int64_t groups = q.n_groups();
  q.codes.resize(static_cast<size_t>(n * k));
  q.scales.resize(static_cast<size_t>(n * groups));
  q.zeros.resize(static_cast<size_t>(n * groups));
  const int32_t maxq = (1 << bits) - 1, half = 1 << (bits - 1);
  const float floor_f16 = to_f16(kScaleFloor);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * q.group_size, c1 = std::min(k, c0 + q.group_size);
      const float* row = w + j * k;
      // Zero always lies in the range (AutoRound clamps min <= 0 <= max; its zero padding of a
      // partial last group changes nothing for the same reason).
      float wmin = 0, wmax = 0;
      for (int64_t c = c0; c < c1; ++c) {
        wmin = std::min(wmin, row[c]);
        wmax = std::max(wmax, row[c]);
      }
      float scale;
      int32_t zero;
      if (sym) {
        const float amin = -wmin;
        // The larger magnitude maps to -2^(b-1); a tie takes the negative scale, as upstream.
        scale = to_f16((amin > wmax ? amin : -wmax) / static_cast<float>(half));
        if (scale < 0) {
          scale = std::min(scale, -floor_f16);
        } else {
          scale = std::max(scale, floor_f16);
        }
        zero = half;
      } else {
        scale = std::max(to_f16((wmax - wmin) / static_cast<float>(maxq)), floor_f16);
        zero = std::clamp(static_cast<int32_t>(std::nearbyint(-wmin / scale)), 0, maxq);
      }
      q.scales[j * groups + g] = scale;
      q.zeros[j * groups + g] = zero;
      for (int64_t c = c0; c < c1; ++c) {
        const float u = std::nearbyint(row[c] / scale) + static_cast<float>(zero);
        q.codes[j * k + c] = static_cast<uint8_t>(std::clamp(u, 0.0f, static_cast<float>(maxq)));
      }
    }
  }
  return q;
}

}  // namespace qs::formats
