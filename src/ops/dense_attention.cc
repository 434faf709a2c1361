// ops: dense attention on the GEMM (see dense_attention.h).
#include "ops/dense_attention.h"

#include <algorithm>
#include <vector>

#include "ops/elementwise.h"
#include "ops/gemm.h"

namespace qs::ops {

namespace {

constexpr int64_t kQueryBlock = 64;

}  // namespace

Status dense_attention(const float* q, const float* k, const float* v, const DenseAttentionShape& s,
                       float* out, ThreadPool& pool) {
  const int64_t row = s.n_heads * s.head_dim;
  if (s.n_q <= 0 || s.n_kv <= 0 || s.n_heads <= 0 || s.head_dim <= 0 || s.q_stride < row ||
      s.k_stride < row || s.v_stride < row || s.out_stride < row || (s.causal && s.n_kv < s.n_q)) {
    return invalid_argument("dense_attention: bad shape (n_q " + std::to_string(s.n_q) + ", n_kv " +
                            std::to_string(s.n_kv) + ", heads " + std::to_string(s.n_heads) +
                            " x " + std::to_string(s.head_dim) + ")");
  }
  // K^T of every head, contiguous: kt[h][d, j], so that Q K^T is a plain GEMM.
  std::vector<float> kt(static_cast<size_t>(s.n_heads * s.head_dim * s.n_kv));
  pool.parallel_for(s.n_kv, [&](int64_t j0, int64_t j1) {
    for (int64_t h = 0; h < s.n_heads; ++h) {
      for (int64_t d = 0; d < s.head_dim; ++d) {
        float* dst = kt.data() + (h * s.head_dim + d) * s.n_kv;
        for (int64_t j = j0; j < j1; ++j) dst[j] = k[j * s.k_stride + h * s.head_dim + d];
      }
    }
  });
  const int64_t n_blocks = (s.n_q + kQueryBlock - 1) / kQueryBlock;
  pool.parallel_for(s.n_heads * n_blocks, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(kQueryBlock * s.n_kv));
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task / n_blocks, q0 = (task % n_blocks) * kQueryBlock;
      const int64_t m = std::min(kQueryBlock, s.n_q - q0);
      kernels::GemmArgs qk{q + q0 * s.q_stride + h * s.head_dim,
                           s.q_stride,
                           1,
                           kt.data() + h * s.head_dim * s.n_kv,
                           s.n_kv,
                           p.data(),
                           s.n_kv,
                           m,
                           s.n_kv,
                           s.head_dim,
                           false};
      QS_CHECK(gemm(qk, nullptr).ok());
      for (int64_t i = 0; i < m; ++i) {
        float* pi = p.data() + i * s.n_kv;
        const int64_t t = q0 + i, n_seen = s.causal ? t + 1 : s.n_kv;
        const float* bias = s.bias ? s.bias + (h * s.n_q + t) * s.n_kv : nullptr;
        // Two plain loops the compiler vectorises, then the SIMD softmax: a scalar exp per
        // score cost as much as both GEMMs for Whisper's 1500-row encoder.
        if (bias) {
          for (int64_t j = 0; j < n_seen; ++j) pi[j] = pi[j] * s.scale + bias[j];
        } else {
          for (int64_t j = 0; j < n_seen; ++j) pi[j] *= s.scale;
        }
        softmax(pi, n_seen);
        std::fill(pi + n_seen, pi + s.n_kv, 0.0f);
      }
      kernels::GemmArgs pv{p.data(),
                           s.n_kv,
                           1,
                           v + h * s.head_dim,
                           s.v_stride,
                           out + q0 * s.out_stride + h * s.head_dim,
                           s.out_stride,
                           m,
                           s.head_dim,
                           s.n_kv,
                           false};
      QS_CHECK(gemm(pv, nullptr).ok());
    }
  });
  return ok_status();
}

}  // namespace qs::ops
