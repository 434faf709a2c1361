// diffusion: the diffusion transformers' shared pieces (see dit_common.h).
#include "diffusion/dit_common.h"

#include <cmath>

#include "ops/activation.h"

namespace qs::diffusion {

Result<Dense> load_dense(const models::Component& c, const std::string& prefix, int64_t n,
                         int64_t k) {
  Dense d;
  QS_ASSIGN_OR_RETURN(d.w, c.linear(prefix, n, k, &d.b));
  return d;
}

Status run_dense(const Dense& d, const float* x, int64_t m, float* y, ThreadPool& pool) {
  return ops::linear(x, m, d.w, d.b.data(), y, pool);
}

Result<MlpEmbedder> load_mlp_embedder(const models::Component& c, const std::string& prefix,
                                      int64_t in, int64_t d) {
  MlpEmbedder e;
  QS_ASSIGN_OR_RETURN(e.l1, load_dense(c, prefix + ".linear_1", d, in));
  QS_ASSIGN_OR_RETURN(e.l2, load_dense(c, prefix + ".linear_2", d, d));
  return e;
}

Status run_mlp_embedder(const MlpEmbedder& e, EmbedderAct act, const float* x, int64_t m, float* y,
                        ThreadPool& pool) {
  std::vector<float> h(static_cast<size_t>(m * e.l1.w.rows()));
  QS_RETURN_IF_ERROR(run_dense(e.l1, x, m, h.data(), pool));
  if (act == EmbedderAct::kSilu) {
    ops::silu(h.data(), static_cast<int64_t>(h.size()));
  } else {
    ops::gelu_tanh(h.data(), static_cast<int64_t>(h.size()));
  }
  return run_dense(e.l2, h.data(), m, y, pool);
}

void timestep_embedding(const float* t, int64_t n, int64_t channels, float scale, float* out) {
  const int64_t half = channels / 2;
  const float log_period = static_cast<float>(-std::log(10000.0));
  for (int64_t b = 0; b < n; ++b) {
    const float ts = t[b] * scale;
    for (int64_t i = 0; i < half; ++i) {
      const float freq = std::exp(log_period * static_cast<float>(i) / static_cast<float>(half));
      const float arg = ts * freq;
      out[b * channels + i] = std::cos(arg);
      out[b * channels + half + i] = std::sin(arg);
    }
  }
}

void modulate(float* x, int64_t groups, int64_t rows, int64_t d, const float* shift,
              const float* scale, int64_t mod_stride, float eps) {
  ops::layer_norm(x, groups * rows, d, nullptr, nullptr, eps, x);
  for (int64_t b = 0; b < groups; ++b) {
    const float* sh = shift + b * mod_stride;
    const float* sc = scale + b * mod_stride;
    for (int64_t r = 0; r < rows; ++r) {
      float* xr = x + (b * rows + r) * d;
      for (int64_t j = 0; j < d; ++j) xr[j] = xr[j] * (1.0f + sc[j]) + sh[j];
    }
  }
}

void gated_add(float* y, const float* a, int64_t groups, int64_t rows, int64_t d, const float* gate,
               int64_t mod_stride) {
  for (int64_t b = 0; b < groups; ++b) {
    const float* g = gate + b * mod_stride;
    for (int64_t r = 0; r < rows; ++r) {
      float* yr = y + (b * rows + r) * d;
      const float* ar = a + (b * rows + r) * d;
      for (int64_t j = 0; j < d; ++j) yr[j] += g[j] * ar[j];
    }
  }
}

void axial_rope_tables(const float* ids, int64_t n, const std::vector<int64_t>& axes, double theta,
                       std::vector<float>* cos, std::vector<float>* sin) {
  const int64_t n_axes = static_cast<int64_t>(axes.size());
  int64_t half = 0;
  for (int64_t d : axes) half += d / 2;
  cos->assign(static_cast<size_t>(n * half), 0.0f);
  sin->assign(static_cast<size_t>(n * half), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    int64_t p = 0;
    for (int64_t a = 0; a < n_axes; ++a) {
      const double pos = ids[t * n_axes + a];
      for (int64_t i = 0; i < axes[a] / 2; ++i, ++p) {
        const double freq =
            1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(axes[a]));
        (*cos)[t * half + p] = static_cast<float>(std::cos(pos * freq));
        (*sin)[t * half + p] = static_cast<float>(std::sin(pos * freq));
      }
    }
  }
}

}  // namespace qs::diffusion
