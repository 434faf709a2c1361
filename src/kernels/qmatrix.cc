// kernels: the scalar quantization of activations against the resident int layout (see
// qmatrix.h; ops/qmatrix_pack.cc repacks a checkpoint's weights into it). The SIMD
// quantize_acts_* in cpu/ must reproduce quantize_acts here bit for bit.
#include "kernels/qmatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/check.h"

namespace qs::kernels {

size_t qacts_bytes(const QMatrixView& w, int64_t m) {
  const auto rows = static_cast<size_t>(m);
  const auto blocks = static_cast<size_t>(w.blocks());
  return qalign_up(rows * static_cast<size_t>(w.k_pad)) + qalign_up(rows * blocks * sizeof(float)) +
         qalign_up(rows * static_cast<size_t>(w.n_groups) * sizeof(float)) +
         qalign_up(rows * blocks * sizeof(int32_t));
}

QActsBuffers qacts_buffers(const QMatrixView& w, int64_t m, void* buf) {
  auto* base = static_cast<uint8_t*>(buf);
  QActsBuffers b;
  b.q = reinterpret_cast<int8_t*>(base);
  base += qalign_up(static_cast<size_t>(m * w.k_pad));
  b.d = reinterpret_cast<float*>(base);
  base += qalign_up(static_cast<size_t>(m * w.blocks()) * sizeof(float));
  b.gsum = reinterpret_cast<float*>(base);
  base += qalign_up(static_cast<size_t>(m * w.n_groups) * sizeof(float));
  b.qsum = reinterpret_cast<int32_t*>(base);
  b.view = {m, w.k_pad, w.n_groups, w.group_size, b.q, b.d, b.gsum, b.qsum};
  return b;
}

// Built without FMA (this file has no ISA flags), so d * qsum is rounded before the add in
// every ISA's activations alike.
void qacts_group_sums(const QMatrixView& w, const QActsBuffers& bufs) {
  const int64_t nb = w.blocks();
  const int64_t blocks_per_group = w.group_size / kQBlock;
  for (int64_t r = 0; r < bufs.view.m; ++r) {
    for (int64_t g = 0; g < w.n_groups; ++g) {
      float s = 0.0f;
      const int64_t b_end = std::min(nb, (g + 1) * blocks_per_group);
      for (int64_t b = g * blocks_per_group; b < b_end; ++b) {
        s += bufs.d[r * nb + b] * static_cast<float>(bufs.qsum[r * nb + b]);
      }
      bufs.gsum[r * w.n_groups + g] = s;
    }
  }
}

QActsView quantize_acts(const QMatrixView& w, const float* x, int64_t m, void* buf) {
  const int64_t nb = w.blocks();
  const QActsBuffers bufs = qacts_buffers(w, m, buf);
  const QActsView a = bufs.view;
  int8_t* const q = bufs.q;
  float* const d = bufs.d;
  int32_t* const qsum = bufs.qsum;

  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * w.k;
    for (int64_t b = 0; b < nb; ++b) {
      float v[kQBlock];
      float amax = 0.0f;
      for (int64_t i = 0; i < kQBlock; ++i) {
        const int64_t c = b * kQBlock + i;
        v[i] = c < w.k ? xr[w.perm != nullptr ? w.perm[c] : c] : 0.0f;
        amax = std::max(amax, std::fabs(v[i]));
      }
      // d = amax / 127 so that |q| <= 127; q = round-half-even(x * 127 / amax), the rounding
      // of cvtps2dq, so that the SIMD versions agree bit for bit.
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      int8_t* qb = q + r * w.k_pad + b * kQBlock;
      for (int64_t i = 0; i < kQBlock; ++i) {
        qb[i] = static_cast<int8_t>(std::lrintf(v[i] * id));
        sum += qb[i];
      }
      d[r * nb + b] = amax / 127.0f;
      qsum[r * nb + b] = sum;
    }
  }
  qacts_group_sums(w, bufs);
  return a;
}

QActsView quantize_acts_declared(const QMatrixView& w, const ActQuant& act, float static_scale,
                                 const float* x, int64_t m, void* buf) {
  QS_CHECK(act.type == ActQuant::kInt8 && act.sym);
  const int64_t nb = w.blocks();
  const QActsBuffers bufs = qacts_buffers(w, m, buf);
  // Blocks per activation scale: the whole row, or one declared group.
  const int64_t span = act.strategy == ActQuant::kGroup ? act.group_size / kQBlock : nb;
  QS_CHECK(span > 0 && (act.strategy != ActQuant::kGroup || act.group_size % kQBlock == 0));
  // x of one row in the weight's input order; grow-only, so decode allocates nothing.
  thread_local std::vector<float> v;
  if (v.size() < static_cast<size_t>(w.k_pad)) v.resize(static_cast<size_t>(w.k_pad));
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * w.k;
    for (int64_t c = 0; c < w.k_pad; ++c) {
      v[static_cast<size_t>(c)] = c < w.k ? xr[w.perm != nullptr ? w.perm[c] : c] : 0.0f;
    }
    for (int64_t b0 = 0; b0 < nb; b0 += span) {
      const int64_t b1 = std::min(nb, b0 + span);
      float d = static_scale;
      if (act.dynamic) {
        float amax = 0.0f;
        for (int64_t c = b0 * kQBlock; c < b1 * kQBlock; ++c) {
          amax = std::max(amax, std::fabs(v[static_cast<size_t>(c)]));
        }
        d = amax / 127.0f;
      }
      for (int64_t b = b0; b < b1; ++b) {
        int32_t sum = 0;
        int8_t* qb = bufs.q + r * w.k_pad + b * kQBlock;
        for (int64_t i = 0; i < kQBlock; ++i) {
          const float xi = v[static_cast<size_t>(b * kQBlock + i)];
          const float t = d > 0.0f ? std::clamp(xi / d, -128.0f, 127.0f) : 0.0f;
          qb[i] = static_cast<int8_t>(std::lrintf(t));
          sum += qb[i];
        }
        bufs.d[r * nb + b] = d;
        bufs.qsum[r * nb + b] = sum;
      }
    }
  }
  qacts_group_sums(w, bufs);
  return bufs.view;
}

}  // namespace qs::kernels
