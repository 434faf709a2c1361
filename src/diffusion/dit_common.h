// diffusion: the pieces diffusers' diffusion transformers share (FLUX's MMDiT, Wan's video DiT):
// a Linear with its bias, the two-layer embedders of embeddings.py (TimestepEmbedding,
// PixArtAlphaTextProjection), the sinusoidal timestep embedding, AdaLN modulation and gated
// residuals, and the axial RoPE tables. All f32 on the host, row-major; matmuls through
// ops::linear, so a weight may be 16-bit or quantized.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/component.h"
#include "ops/linear.h"

namespace qs::diffusion {

// A Linear with its bias: y = x W^T + b.
struct Dense {
  ops::LinearWeight w;   // [n, k]
  std::vector<float> b;  // [n]
};

Result<Dense> load_dense(const models::Component& c, const std::string& prefix, int64_t n,
                         int64_t k);
// y [m, n] = x [m, k] W^T + b.
Status run_dense(const Dense& d, const float* x, int64_t m, float* y, ThreadPool& pool);

// linear_1 -> activation -> linear_2: TimestepEmbedding (SiLU) and PixArtAlphaTextProjection
// (SiLU in FLUX, tanh-approximated GELU in Wan).
struct MlpEmbedder {
  Dense l1;  // [d, in]
  Dense l2;  // [d, d]
};
enum class EmbedderAct { kSilu, kGeluTanh };

// Reads `prefix`.linear_1 [d, in] and `prefix`.linear_2 [d, d].
Result<MlpEmbedder> load_mlp_embedder(const models::Component& c, const std::string& prefix,
                                      int64_t in, int64_t d);
// y [m, d] from x [m, in].
Status run_mlp_embedder(const MlpEmbedder& e, EmbedderAct act, const float* x, int64_t m, float* y,
                        ThreadPool& pool);

// diffusers' get_timestep_embedding(t * scale, channels, flip_sin_to_cos=True,
// downscale_freq_shift=0) in f32 as it computes it: out [n, channels] = [cos, sin] of
// t * scale * 10000^(-i / (channels / 2)). channels must be even.
void timestep_embedding(const float* t, int64_t n, int64_t channels, float scale, float* out);

// x[b, r, :] = LayerNorm(x[b, r, :]) * (1 + scale[b]) + shift[b] for `rows` rows per group b
// of `groups`; shift and scale are rows of a modulation vector with stride `mod_stride`.
void modulate(float* x, int64_t groups, int64_t rows, int64_t d, const float* shift,
              const float* scale, int64_t mod_stride, float eps);

// y[b, r, :] += gate[b] * a[b, r, :], with the groups and strides of modulate().
void gated_add(float* y, const float* a, int64_t groups, int64_t rows, int64_t d, const float* gate,
               int64_t mod_stride);

// Axial RoPE (diffusers' get_1d_rotary_pos_embed per axis, float64 as on CPU, axes
// concatenated): for token t and axis a of dim d_a, pair i turns by
// ids[t, a] * theta^(-2i / d_a). ids: [n, axes.size()]; cos, sin: [n, sum(axes) / 2], one
// angle per interleaved pair (ops::rope_interleaved).
void axial_rope_tables(const float* ids, int64_t n, const std::vector<int64_t>& axes, double theta,
                       std::vector<float>* cos, std::vector<float>* sin);

}  // namespace qs::diffusion
