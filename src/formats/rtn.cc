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

struct GroupParams {
  float scale;
  int32_t zero;
};

// Scale and zero of a group whose range is [wmin, wmax] (wmin <= 0 <= wmax).
GroupParams params_for(float wmin, float wmax, int bits, bool sym) {
  const int32_t maxq = (1 << bits) - 1, half = 1 << (bits - 1);
  const float floor_f16 = to_f16(kScaleFloor);
  if (sym) {
    const float amin = -wmin;
    // The larger magnitude maps to -2^(b-1); a tie takes the negative scale, as upstream.
    const float scale = to_f16((amin > wmax ? amin : -wmax) / static_cast<float>(half));
    return {scale < 0 ? std::min(scale, -floor_f16) : std::max(scale, floor_f16), half};
  }
  const float scale = std::max(to_f16((wmax - wmin) / static_cast<float>(maxq)), floor_f16);
  return {scale, std::clamp(static_cast<int32_t>(std::nearbyint(-wmin / scale)), 0, maxq)};
}

// Zero always lies in the range (AutoRound clamps min <= 0 <= max; its zero padding of a
// partial last group changes nothing for the same reason).
void range_of(const float* w, int64_t count, float* wmin, float* wmax) {
  for (int64_t i = 0; i < count; ++i) {
    *wmin = std::min(*wmin, w[i]);
    *wmax = std::max(*wmax, w[i]);
  }
}

}  // namespace

QuantizedWeight rtn_quantize(const float* w, int64_t n, int64_t k, int bits, int64_t group_size,
                             bool sym) {
  QS_CHECK(n > 0 && k > 0);
  QS_CHECK(bits >= 2 && bits <= 8);
  QS_CHECK(group_size >= -1);
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
  const float maxq = static_cast<float>((1 << bits) - 1);
  float tensor_min = 0, tensor_max = 0;
  if (group_size == 0) range_of(w, n * k, &tensor_min, &tensor_max);
  for (int64_t j = 0; j < n; ++j) {
    const float* row = w + j * k;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * q.group_size, c1 = std::min(k, c0 + q.group_size);
      float wmin = tensor_min, wmax = tensor_max;
      if (group_size != 0) range_of(row + c0, c1 - c0, &wmin, &wmax);
      const GroupParams p = params_for(wmin, wmax, bits, sym);
      q.scales[j * groups + g] = p.scale;
      q.zeros[j * groups + g] = p.zero;
      for (int64_t c = c0; c < c1; ++c) {
        const float u = std::nearbyint(row[c] / p.scale) + static_cast<float>(p.zero);
        q.codes[j * k + c] = static_cast<uint8_t>(std::clamp(u, 0.0f, maxq));
      }
    }
  }
  return q;
}

QuantizedWeight fp8_quantize(const float* w, int64_t n, int64_t k, int64_t block) {
  QS_CHECK(n > 0 && k > 0 && block >= 0);
  QuantizedWeight q;
  q.n = n;
  q.k = k;
  q.bits = 8;
  q.code_type = CodeType::kFp8E4m3;
  q.group_size = block > 0 ? block : k;
  q.scale_dtype = DType::kF32;
  const int64_t groups = q.n_groups();
  const int64_t rows_per_scale = block > 0 ? block : 1;
  q.codes.resize(static_cast<size_t>(n * k));
  q.scales.resize(static_cast<size_t>(n * groups));
  q.zeros.assign(static_cast<size_t>(n * groups), 0);
  for (int64_t j0 = 0; j0 < n; j0 += rows_per_scale) {
    const int64_t j1 = std::min(n, j0 + rows_per_scale);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * q.group_size, c1 = std::min(k, c0 + q.group_size);
      float amax = 0.0f;
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[j * k + c]));
      const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      for (int64_t j = j0; j < j1; ++j) {
        q.scales[static_cast<size_t>(j * groups + g)] = scale;
        for (int64_t c = c0; c < c1; ++c) {
          q.codes[static_cast<size_t>(j * k + c)] = f32_to_fp8_e4m3(w[j * k + c] / scale);
        }
      }
    }
  }
  return q;
}

}  // namespace qs::formats
