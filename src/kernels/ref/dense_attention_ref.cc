// kernels/ref: dense multi-head attention (see dense_attention_ref.h), one query row and head
// at a time with a double-precision softmax.
#include "kernels/ref/dense_attention_ref.h"

#include <cmath>
#include <limits>
#include <vector>

namespace qs::kernels::ref {

void dense_attention(const float* q, const float* k, const float* v, const DenseAttentionShape& s,
                     float* out) {
  std::vector<double> p(s.n_kv);
  for (int64_t h = 0; h < s.n_heads; ++h) {
    for (int64_t t = 0; t < s.n_q; ++t) {
      const float* qt = q + t * s.q_stride + h * s.head_dim;
      const int64_t n_seen = s.causal ? t + 1 : s.n_kv;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n_seen; ++j) {
        const float* kj = k + j * s.k_stride + h * s.head_dim;
        double dot = 0.0;
        for (int64_t d = 0; d < s.head_dim; ++d) dot += static_cast<double>(qt[d]) * kj[d];
        p[j] = dot * s.scale + (s.bias ? s.bias[(h * s.n_q + t) * s.n_kv + j] : 0.0f);
        if (p[j] > mx) mx = p[j];
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n_seen; ++j) sum += (p[j] = std::exp(p[j] - mx));
      float* o = out + t * s.out_stride + h * s.head_dim;
      for (int64_t d = 0; d < s.head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < n_seen; ++j) acc += p[j] * v[j * s.v_stride + h * s.head_dim + d];
        o[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace qs::kernels::ref
