// diffusion: the FLUX.1 transformer forward (see flux_transformer.h). Follows diffusers'
// FluxTransformer2DModel.forward step by step; comments name the diffusers module each part
// mirrors.
#include "diffusion/flux_transformer.h"

#include <cmath>

#include "ops/activation.h"
#include "ops/dense_attention.h"
#include "ops/elementwise.h"

namespace qs::diffusion {

namespace {

// nn.LayerNorm(elementwise_affine=False, eps=1e-6) of FLUX's AdaLN norms.
constexpr float kNormEps = 1e-6f;
// Timesteps(num_channels=256, flip_sin_to_cos=True, downscale_freq_shift=0).
constexpr int64_t kTimeChannels = 256;
constexpr double kRopeTheta = 10000.0;

Status load_attention(const models::Component& c, const std::string& p, const FluxConfig& cfg,
                      bool joint, FluxAttentionWeights* a) {
  const int64_t d = cfg.inner_dim(), hd = cfg.attention_head_dim;
  QS_ASSIGN_OR_RETURN(a->q, load_dense(c, p + ".to_q", d, d));
  QS_ASSIGN_OR_RETURN(a->k, load_dense(c, p + ".to_k", d, d));
  QS_ASSIGN_OR_RETURN(a->v, load_dense(c, p + ".to_v", d, d));
  QS_ASSIGN_OR_RETURN(a->norm_q, c.f32(p + ".norm_q.weight", {hd}));
  QS_ASSIGN_OR_RETURN(a->norm_k, c.f32(p + ".norm_k.weight", {hd}));
  if (!joint) return ok_status();
  QS_ASSIGN_OR_RETURN(a->add_q, load_dense(c, p + ".add_q_proj", d, d));
  QS_ASSIGN_OR_RETURN(a->add_k, load_dense(c, p + ".add_k_proj", d, d));
  QS_ASSIGN_OR_RETURN(a->add_v, load_dense(c, p + ".add_v_proj", d, d));
  QS_ASSIGN_OR_RETURN(a->norm_add_q, c.f32(p + ".norm_added_q.weight", {hd}));
  QS_ASSIGN_OR_RETURN(a->norm_add_k, c.f32(p + ".norm_added_k.weight", {hd}));
  QS_ASSIGN_OR_RETURN(a->out, load_dense(c, p + ".to_out.0", d, d));
  QS_ASSIGN_OR_RETURN(a->add_out, load_dense(c, p + ".to_add_out", d, d));
  return ok_status();
}

// q, k, v: [batch, s, inner] after norms; RoPE on q and k, then attention per batch item.
Status joint_attention(const FluxConfig& cfg, float* q, float* k, const float* v, int64_t batch,
                       int64_t s, const std::vector<float>& cos, const std::vector<float>& sin,
                       float* out, ThreadPool& pool) {
  const int64_t d = cfg.inner_dim(), hd = cfg.attention_head_dim, h = cfg.num_attention_heads;
  for (int64_t b = 0; b < batch; ++b) {
    ops::rope_interleaved(q + b * s * d, s, d, h, hd, cos.data(), sin.data());
    ops::rope_interleaved(k + b * s * d, s, d, h, hd, cos.data(), sin.data());
    ops::DenseAttentionShape shape{
        s, s, h, hd, d, d, d, d, 1.0f / std::sqrt(static_cast<float>(hd))};
    QS_RETURN_IF_ERROR(ops::dense_attention(q + b * s * d, k + b * s * d, v + b * s * d, shape,
                                            out + b * s * d, pool));
  }
  return ok_status();
}

}  // namespace

Result<FluxConfig> read_flux_config(const models::Component& c) {
  FluxConfig f;
  QS_ASSIGN_OR_RETURN(f.patch_size, c.int_field("patch_size", 1));
  QS_ASSIGN_OR_RETURN(f.in_channels, c.int_field("in_channels", 64));
  QS_ASSIGN_OR_RETURN(f.out_channels, c.int_field("out_channels", f.in_channels));
  QS_ASSIGN_OR_RETURN(f.num_layers, c.int_field("num_layers", 19));
  QS_ASSIGN_OR_RETURN(f.num_single_layers, c.int_field("num_single_layers", 38));
  QS_ASSIGN_OR_RETURN(f.attention_head_dim, c.int_field("attention_head_dim", 128));
  QS_ASSIGN_OR_RETURN(f.num_attention_heads, c.int_field("num_attention_heads", 24));
  QS_ASSIGN_OR_RETURN(f.joint_attention_dim, c.int_field("joint_attention_dim", 4096));
  QS_ASSIGN_OR_RETURN(f.pooled_projection_dim, c.int_field("pooled_projection_dim", 768));
  QS_ASSIGN_OR_RETURN(f.guidance_embeds, c.bool_field("guidance_embeds", false));
  QS_ASSIGN_OR_RETURN(f.axes_dims_rope, c.int_list_field("axes_dims_rope", {16, 56, 56}));
  const std::string where = c.dir() + "/config.json: ";
  if (f.patch_size != 1) {
    return unimplemented(where + "patch_size " + std::to_string(f.patch_size) +
                         " (FLUX packs 2x2 latents before the transformer; only 1 is supported)");
  }
  int64_t rope = 0;
  bool even = true;
  for (int64_t a : f.axes_dims_rope) rope += a, even = even && a > 0 && a % 2 == 0;
  if (f.axes_dims_rope.size() != 3 || !even || rope != f.attention_head_dim) {
    return invalid_argument(where +
                            "axes_dims_rope must be three even sizes summing to "
                            "attention_head_dim " +
                            std::to_string(f.attention_head_dim));
  }
  for (int64_t v : {f.in_channels, f.out_channels, f.num_attention_heads, f.joint_attention_dim,
                    f.pooled_projection_dim}) {
    if (v <= 0 || v > (int64_t{1} << 20)) return invalid_argument(where + "a size is out of range");
  }
  if (f.num_layers < 0 || f.num_single_layers < 0 || f.num_layers + f.num_single_layers > 1024) {
    return invalid_argument(where + "num_layers / num_single_layers out of range");
  }
  return f;
}

Result<FluxTransformer> FluxTransformer::load(const std::string& dir) {
  FluxTransformer t;
  QS_ASSIGN_OR_RETURN(t.weights_, models::Component::open(dir));
  const models::Component& c = t.weights_;
  QS_ASSIGN_OR_RETURN(t.config_, read_flux_config(c));
  const FluxConfig& f = t.config_;
  const int64_t d = f.inner_dim();
  QS_ASSIGN_OR_RETURN(t.x_embedder_, load_dense(c, "x_embedder", d, f.in_channels));
  QS_ASSIGN_OR_RETURN(t.context_embedder_,
                      load_dense(c, "context_embedder", d, f.joint_attention_dim));
  QS_ASSIGN_OR_RETURN(t.time_embed_,
                      load_mlp_embedder(c, "time_text_embed.timestep_embedder", kTimeChannels, d));
  if (f.guidance_embeds) {
    QS_ASSIGN_OR_RETURN(t.guidance_embed_, load_mlp_embedder(c, "time_text_embed.guidance_embedder",
                                                             kTimeChannels, d));
  }
  QS_ASSIGN_OR_RETURN(t.text_embed_, load_mlp_embedder(c, "time_text_embed.text_embedder",
                                                       f.pooled_projection_dim, d));
  for (int64_t i = 0; i < f.num_layers; ++i) {
    const std::string p = "transformer_blocks." + std::to_string(i);
    FluxDoubleBlock b;
    QS_ASSIGN_OR_RETURN(b.norm1, load_dense(c, p + ".norm1.linear", 6 * d, d));
    QS_ASSIGN_OR_RETURN(b.norm1_context, load_dense(c, p + ".norm1_context.linear", 6 * d, d));
    QS_RETURN_IF_ERROR(load_attention(c, p + ".attn", f, true, &b.attn));
    QS_ASSIGN_OR_RETURN(b.ff_in, load_dense(c, p + ".ff.net.0.proj", 4 * d, d));
    QS_ASSIGN_OR_RETURN(b.ff_out, load_dense(c, p + ".ff.net.2", d, 4 * d));
    QS_ASSIGN_OR_RETURN(b.ff_ctx_in, load_dense(c, p + ".ff_context.net.0.proj", 4 * d, d));
    QS_ASSIGN_OR_RETURN(b.ff_ctx_out, load_dense(c, p + ".ff_context.net.2", d, 4 * d));
    t.double_blocks_.push_back(std::move(b));
  }
  for (int64_t i = 0; i < f.num_single_layers; ++i) {
    const std::string p = "single_transformer_blocks." + std::to_string(i);
    FluxSingleBlock b;
    QS_ASSIGN_OR_RETURN(b.norm, load_dense(c, p + ".norm.linear", 3 * d, d));
    QS_RETURN_IF_ERROR(load_attention(c, p + ".attn", f, false, &b.attn));
    QS_ASSIGN_OR_RETURN(b.proj_mlp, load_dense(c, p + ".proj_mlp", 4 * d, d));
    QS_ASSIGN_OR_RETURN(b.proj_out, load_dense(c, p + ".proj_out", d, 5 * d));
    t.single_blocks_.push_back(std::move(b));
  }
  QS_ASSIGN_OR_RETURN(t.norm_out_, load_dense(c, "norm_out.linear", 2 * d, d));
  QS_ASSIGN_OR_RETURN(t.proj_out_, load_dense(c, "proj_out", f.out_channels, d));
  return t;
}

Status FluxTransformer::forward(const FluxInputs& in, float* out, ThreadPool& pool) const {
  const FluxConfig& f = config_;
  const int64_t B = in.batch, ni = in.n_img, nt = in.n_txt, s = ni + nt;
  const int64_t d = f.inner_dim(), hd = f.attention_head_dim, h = f.num_attention_heads;
  if (B <= 0 || ni <= 0 || nt < 0 || !in.img || !in.pooled || !in.timestep || !in.img_ids ||
      (nt > 0 && (!in.txt || !in.txt_ids))) {
    return invalid_argument("flux transformer: missing input or empty batch");
  }
  if (f.guidance_embeds != (in.guidance != nullptr)) {
    return invalid_argument(f.guidance_embeds
                                ? "flux transformer: this model embeds guidance; none given"
                                : "flux transformer: this model has no guidance embedding");
  }

  // CombinedTimestep(Guidance)TextProjEmbeddings: temb = t_emb (+ g_emb) + text_emb.
  std::vector<float> proj(static_cast<size_t>(B * kTimeChannels)), temb(B * d), tmp(B * d);
  timestep_embedding(in.timestep, B, kTimeChannels, 1000.0f, proj.data());
  QS_RETURN_IF_ERROR(
      run_mlp_embedder(time_embed_, EmbedderAct::kSilu, proj.data(), B, temb.data(), pool));
  if (f.guidance_embeds) {
    timestep_embedding(in.guidance, B, kTimeChannels, 1000.0f, proj.data());
    QS_RETURN_IF_ERROR(
        run_mlp_embedder(guidance_embed_, EmbedderAct::kSilu, proj.data(), B, tmp.data(), pool));
    ops::add_inplace(temb.data(), tmp.data(), B * d);
  }
  QS_RETURN_IF_ERROR(
      run_mlp_embedder(text_embed_, EmbedderAct::kSilu, in.pooled, B, tmp.data(), pool));
  ops::add_inplace(temb.data(), tmp.data(), B * d);
  std::vector<float> act(temb);  // SiLU(temb), the input of every modulation linear
  ops::silu(act.data(), B * d);

  std::vector<float> cos, sin, ids(static_cast<size_t>(s * 3));
  std::copy(in.txt_ids, in.txt_ids + nt * 3, ids.begin());
  std::copy(in.img_ids, in.img_ids + ni * 3, ids.begin() + nt * 3);
  axial_rope_tables(ids.data(), s, f.axes_dims_rope, kRopeTheta, &cos, &sin);

  std::vector<float> img(B * ni * d), txt(B * nt * d);
  QS_RETURN_IF_ERROR(run_dense(x_embedder_, in.img, B * ni, img.data(), pool));
  if (nt > 0) QS_RETURN_IF_ERROR(run_dense(context_embedder_, in.txt, B * nt, txt.data(), pool));

  // Joint buffers [B, s, d], text rows first, as diffusers concatenates them.
  std::vector<float> q(B * s * d), k(B * s * d), v(B * s * d), att(B * s * d);
  std::vector<float> mod(B * 6 * d), mod_c(B * 6 * d);
  std::vector<float> n_img(B * ni * d), n_txt(B * nt * d), part(B * s * d);
  std::vector<float> ff(B * s * 4 * d);
  // Projects `rows` rows per batch item of x into rows [row0, row0 + rows) of the joint
  // buffer, with the per-head RMSNorm.
  auto project = [&](const Dense& w, const std::vector<float>* norm, const float* x, int64_t rows,
                     int64_t row0, float* joint) -> Status {
    QS_RETURN_IF_ERROR(run_dense(w, x, B * rows, part.data(), pool));
    if (norm) ops::rms_norm(part.data(), B * rows * h, hd, norm->data(), kNormEps, part.data());
    for (int64_t b = 0; b < B; ++b) {
      std::copy(part.begin() + b * rows * d, part.begin() + (b + 1) * rows * d,
                joint + (b * s + row0) * d);
    }
    return ok_status();
  };
  // Copies rows [row0, row0 + rows) of every batch item of a joint buffer out, contiguous.
  auto gather = [&](const float* joint, int64_t rows, int64_t row0, float* dst) {
    for (int64_t b = 0; b < B; ++b) {
      std::copy(joint + (b * s + row0) * d, joint + (b * s + row0 + rows) * d, dst + b * rows * d);
    }
  };
  // FeedForward(activation_fn="gelu-approximate"): x += gate * net.2(gelu_tanh(net.0(norm x))).
  auto feed_forward = [&](const Dense& w_in, const Dense& w_out, float* x, float* nx, int64_t rows,
                          const float* m) -> Status {
    std::copy(x, x + B * rows * d, nx);
    modulate(nx, B, rows, d, m + 3 * d, m + 4 * d, 6 * d, kNormEps);
    QS_RETURN_IF_ERROR(run_dense(w_in, nx, B * rows, ff.data(), pool));
    ops::gelu_tanh(ff.data(), B * rows * 4 * d);
    QS_RETURN_IF_ERROR(run_dense(w_out, ff.data(), B * rows, part.data(), pool));
    gated_add(x, part.data(), B, rows, d, m + 5 * d, 6 * d);
    return ok_status();
  };

  for (const FluxDoubleBlock& blk : double_blocks_) {
    // AdaLayerNormZero: shift, scale, gate (attention), shift, scale, gate (MLP).
    QS_RETURN_IF_ERROR(run_dense(blk.norm1, act.data(), B, mod.data(), pool));
    QS_RETURN_IF_ERROR(run_dense(blk.norm1_context, act.data(), B, mod_c.data(), pool));
    std::copy(img.begin(), img.end(), n_img.begin());
    modulate(n_img.data(), B, ni, d, mod.data(), mod.data() + d, 6 * d, kNormEps);
    std::copy(txt.begin(), txt.end(), n_txt.begin());
    if (nt > 0) modulate(n_txt.data(), B, nt, d, mod_c.data(), mod_c.data() + d, 6 * d, kNormEps);
    const FluxAttentionWeights& a = blk.attn;
    QS_RETURN_IF_ERROR(project(a.q, &a.norm_q, n_img.data(), ni, nt, q.data()));
    QS_RETURN_IF_ERROR(project(a.k, &a.norm_k, n_img.data(), ni, nt, k.data()));
    QS_RETURN_IF_ERROR(project(a.v, nullptr, n_img.data(), ni, nt, v.data()));
    if (nt > 0) {
      QS_RETURN_IF_ERROR(project(a.add_q, &a.norm_add_q, n_txt.data(), nt, 0, q.data()));
      QS_RETURN_IF_ERROR(project(a.add_k, &a.norm_add_k, n_txt.data(), nt, 0, k.data()));
      QS_RETURN_IF_ERROR(project(a.add_v, nullptr, n_txt.data(), nt, 0, v.data()));
    }
    QS_RETURN_IF_ERROR(
        joint_attention(f, q.data(), k.data(), v.data(), B, s, cos, sin, att.data(), pool));
    gather(att.data(), ni, nt, n_img.data());
    QS_RETURN_IF_ERROR(run_dense(a.out, n_img.data(), B * ni, part.data(), pool));
    gated_add(img.data(), part.data(), B, ni, d, mod.data() + 2 * d, 6 * d);
    QS_RETURN_IF_ERROR(
        feed_forward(blk.ff_in, blk.ff_out, img.data(), n_img.data(), ni, mod.data()));
    if (nt > 0) {
      gather(att.data(), nt, 0, n_txt.data());
      QS_RETURN_IF_ERROR(run_dense(a.add_out, n_txt.data(), B * nt, part.data(), pool));
      gated_add(txt.data(), part.data(), B, nt, d, mod_c.data() + 2 * d, 6 * d);
      QS_RETURN_IF_ERROR(
          feed_forward(blk.ff_ctx_in, blk.ff_ctx_out, txt.data(), n_txt.data(), nt, mod_c.data()));
    }
  }

  // Single-stream blocks over x = [txt; img].
  std::vector<float> x(B * s * d), nx(B * s * d), cat(B * s * 5 * d);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(txt.begin() + b * nt * d, txt.begin() + (b + 1) * nt * d, x.begin() + b * s * d);
    std::copy(img.begin() + b * ni * d, img.begin() + (b + 1) * ni * d,
              x.begin() + (b * s + nt) * d);
  }
  for (const FluxSingleBlock& blk : single_blocks_) {
    // AdaLayerNormZeroSingle: shift, scale, gate.
    QS_RETURN_IF_ERROR(run_dense(blk.norm, act.data(), B, mod.data(), pool));
    std::copy(x.begin(), x.end(), nx.begin());
    modulate(nx.data(), B, s, d, mod.data(), mod.data() + d, 3 * d, kNormEps);
    const FluxAttentionWeights& a = blk.attn;
    QS_RETURN_IF_ERROR(project(a.q, &a.norm_q, nx.data(), s, 0, q.data()));
    QS_RETURN_IF_ERROR(project(a.k, &a.norm_k, nx.data(), s, 0, k.data()));
    QS_RETURN_IF_ERROR(project(a.v, nullptr, nx.data(), s, 0, v.data()));
    QS_RETURN_IF_ERROR(
        joint_attention(f, q.data(), k.data(), v.data(), B, s, cos, sin, att.data(), pool));
    QS_RETURN_IF_ERROR(run_dense(blk.proj_mlp, nx.data(), B * s, ff.data(), pool));
    ops::gelu_tanh(ff.data(), B * s * 4 * d);
    // proj_out(cat([attn, mlp], dim=-1)).
    for (int64_t r = 0; r < B * s; ++r) {
      std::copy(att.begin() + r * d, att.begin() + (r + 1) * d, cat.begin() + r * 5 * d);
      std::copy(ff.begin() + r * 4 * d, ff.begin() + (r + 1) * 4 * d, cat.begin() + r * 5 * d + d);
    }
    QS_RETURN_IF_ERROR(run_dense(blk.proj_out, cat.data(), B * s, part.data(), pool));
    gated_add(x.data(), part.data(), B, s, d, mod.data() + 2 * d, 3 * d);
  }

  // AdaLayerNormContinuous: scale, shift (in that order), then proj_out on the image rows.
  QS_RETURN_IF_ERROR(run_dense(norm_out_, act.data(), B, mod.data(), pool));
  gather(x.data(), ni, nt, n_img.data());
  modulate(n_img.data(), B, ni, d, mod.data() + d, mod.data(), 2 * d, kNormEps);
  return run_dense(proj_out_, n_img.data(), B * ni, out, pool);
}

std::vector<FluxTensorSpec> flux_tensor_specs(const FluxConfig& f) {
  const int64_t d = f.inner_dim(), hd = f.attention_head_dim;
  std::vector<FluxTensorSpec> t;
  auto linear = [&](const std::string& p, int64_t n, int64_t k) {
    t.push_back({p + ".weight", {n, k}});
    t.push_back({p + ".bias", {n}});
  };
  auto embedder = [&](const std::string& p, int64_t in) {
    linear(p + ".linear_1", d, in);
    linear(p + ".linear_2", d, d);
  };
  linear("x_embedder", d, f.in_channels);
  linear("context_embedder", d, f.joint_attention_dim);
  embedder("time_text_embed.timestep_embedder", kTimeChannels);
  if (f.guidance_embeds) embedder("time_text_embed.guidance_embedder", kTimeChannels);
  embedder("time_text_embed.text_embedder", f.pooled_projection_dim);
  auto attention = [&](const std::string& p, bool joint) {
    for (const char* m : {"to_q", "to_k", "to_v"}) linear(p + "." + m, d, d);
    t.push_back({p + ".norm_q.weight", {hd}});
    t.push_back({p + ".norm_k.weight", {hd}});
    if (!joint) return;
    for (const char* m : {"add_q_proj", "add_k_proj", "add_v_proj"}) linear(p + "." + m, d, d);
    t.push_back({p + ".norm_added_q.weight", {hd}});
    t.push_back({p + ".norm_added_k.weight", {hd}});
    linear(p + ".to_out.0", d, d);
    linear(p + ".to_add_out", d, d);
  };
  for (int64_t i = 0; i < f.num_layers; ++i) {
    const std::string p = "transformer_blocks." + std::to_string(i);
    linear(p + ".norm1.linear", 6 * d, d);
    linear(p + ".norm1_context.linear", 6 * d, d);
    attention(p + ".attn", true);
    for (const char* ff : {".ff", ".ff_context"}) {
      linear(p + ff + ".net.0.proj", 4 * d, d);
      linear(p + ff + ".net.2", d, 4 * d);
    }
  }
  for (int64_t i = 0; i < f.num_single_layers; ++i) {
    const std::string p = "single_transformer_blocks." + std::to_string(i);
    linear(p + ".norm.linear", 3 * d, d);
    attention(p + ".attn", false);
    linear(p + ".proj_mlp", 4 * d, d);
    linear(p + ".proj_out", d, 5 * d);
  }
  linear("norm_out.linear", 2 * d, d);
  linear("proj_out", f.out_channels, d);
  return t;
}

size_t flux_activation_bytes(const FluxConfig& f, int64_t batch, int64_t n_img, int64_t n_txt,
                             int threads) {
  const int64_t d = f.inner_dim(), s = n_img + n_txt, bsd = batch * s * d;
  // forward(): img + txt (1), q, k, v, att (4), n_img + n_txt (1), part (1), ff (4), then
  // x, nx (2) and cat (5); mod, mod_c, temb and the embedder outputs are O(batch * d).
  const int64_t kept = 18 * bsd + 16 * batch * d;
  // RoPE cos and sin tables (s x head_dim / 2 each) and the packed ids.
  const int64_t rope = s * f.attention_head_dim + 3 * s;
  // ops::dense_attention per call: k transposed (s x d) and a 64-query score block per thread.
  const int64_t attention = s * d + int64_t{threads} * 64 * s;
  // The linear kernels' activation buffer for the widest input (proj_out, 5d): bf16 values
  // (2 bytes) plus per-group sums, at most 3 bytes an input.
  const int64_t linear_bytes = 3 * batch * s * 5 * d;
  return static_cast<size_t>(4 * (kept + rope + attention) + linear_bytes);
}

}  // namespace qs::diffusion
