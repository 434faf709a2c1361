// diffusion: the Wan transformer forward (see wan_transformer.h). Follows diffusers'
// WanTransformer3DModel.forward step by step; comments name the diffusers module each part
// mirrors. Everything runs in f32, which covers diffusers' explicit float32 parts (the
// modulation `.float()`, FP32LayerNorm, the rope tables, time_embedder in _keep_in_fp32_modules).
#include "diffusion/wan_transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/limits.h"
#include "ops/activation.h"
#include "ops/dense_attention.h"
#include "ops/elementwise.h"

namespace qs::diffusion {

namespace {

// WanRotaryPosEmbed's theta.
constexpr double kWanRopeTheta = 10000.0;
// The feed-forward runs over this many token rows at a time: its hidden activations
// (ffn_dim = 2.7 x inner in the A14B models) would otherwise be the largest buffer of a
// forward, and rows are independent there.
constexpr int64_t kWanFfnChunkRows = 4096;

// Rows [row0, row0 + rows) of the token matrix share modulation row `index` (a batch item, or
// a run of tokens with the same per-token timestep).
struct ModGroup {
  int64_t row0, rows, index;
};

// The distinct timesteps of a forward and the runs of token rows that use each. Equal
// timesteps give equal embeddings, so TI2V's per-token timesteps (two values: 0 on the first
// frame's tokens, t elsewhere) cost two embeddings rather than one per token, and a CFG batch
// shares one.
struct TimestepGroups {
  std::vector<float> values;     // [n_distinct]
  std::vector<ModGroup> groups;  // covering [0, batch * seq) in order
};

TimestepGroups group_timesteps(const WanInputs& in, int64_t seq) {
  TimestepGroups g;
  std::map<uint32_t, int64_t> index_of;                      // keyed by the bits: exact equality
  const int64_t per_item = in.per_token_timestep ? seq : 1;  // timesteps per batch item
  const int64_t rows = seq / per_item;                       // token rows per timestep
  for (int64_t i = 0; i < in.batch * per_item; ++i) {
    const float t = in.timestep[i];
    uint32_t bits;
    std::memcpy(&bits, &t, sizeof bits);
    auto [it, added] = index_of.emplace(bits, static_cast<int64_t>(g.values.size()));
    if (added) g.values.push_back(t);
    if (!g.groups.empty() && g.groups.back().index == it->second) {
      g.groups.back().rows += rows;
    } else {
      g.groups.push_back({i * rows, rows, it->second});
    }
  }
  return g;
}

// modulate() per group: mod rows of `stride` floats, shift and scale at those offsets.
void modulate_groups(float* x, const std::vector<ModGroup>& groups, int64_t d, const float* mod,
                     int64_t stride, int64_t shift_at, int64_t scale_at, float eps) {
  for (const ModGroup& g : groups) {
    const float* m = mod + g.index * stride;
    modulate(x + g.row0 * d, 1, g.rows, d, m + shift_at, m + scale_at, 0, eps);
  }
}

void gated_add_groups(float* x, const float* a, const std::vector<ModGroup>& groups, int64_t d,
                      const float* mod, int64_t stride, int64_t gate_at) {
  for (const ModGroup& g : groups) {
    gated_add(x + g.row0 * d, a + g.row0 * d, 1, g.rows, d, mod + g.index * stride + gate_at, 0);
  }
}

// The WanAttention linears of `p` ("blocks.0.attn1"): q, k, v, out and the norms.
Status load_wan_attention(const models::Component& c, const std::string& p, int64_t d, Dense* q,
                          Dense* k, Dense* v, Dense* out, std::vector<float>* norm_q,
                          std::vector<float>* norm_k) {
  QS_ASSIGN_OR_RETURN(*q, load_dense(c, p + ".to_q", d, d));
  QS_ASSIGN_OR_RETURN(*k, load_dense(c, p + ".to_k", d, d));
  QS_ASSIGN_OR_RETURN(*v, load_dense(c, p + ".to_v", d, d));
  QS_ASSIGN_OR_RETURN(*out, load_dense(c, p + ".to_out.0", d, d));
  QS_ASSIGN_OR_RETURN(*norm_q, c.f32(p + ".norm_q.weight", {d}));
  QS_ASSIGN_OR_RETURN(*norm_k, c.f32(p + ".norm_k.weight", {d}));
  return ok_status();
}

// A config key Wan2.1's CLIP image conditioning sets; Wan2.2 leaves it null.
Status refuse_image_conditioning(const models::Component& c, const std::string& key) {
  if (!c.config().contains(key) || c.config()[key].is_null()) return ok_status();
  return unimplemented(c.dir() + "/config.json: " + key + " is " + c.config()[key].dump() +
                       ": Wan2.1's CLIP image conditioning is not supported (Wan2.2's "
                       "image-to-video models condition through the latent channels and leave " +
                       key + " null)");
}

}  // namespace

std::vector<int64_t> WanTransformerConfig::rope_axes() const {
  const int64_t hw = 2 * (attention_head_dim / 6);
  return {attention_head_dim - 2 * hw, hw, hw};
}

Result<WanTransformerConfig> read_wan_transformer_config(const models::Component& c) {
  WanTransformerConfig f;
  const std::string where = c.dir() + "/config.json: ";
  for (const char* key : {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"}) {
    QS_RETURN_IF_ERROR(refuse_image_conditioning(c, key));
  }
  QS_ASSIGN_OR_RETURN(f.patch_size, c.int_list_field("patch_size", {1, 2, 2}));
  QS_ASSIGN_OR_RETURN(f.num_attention_heads, c.int_field("num_attention_heads", 40));
  QS_ASSIGN_OR_RETURN(f.attention_head_dim, c.int_field("attention_head_dim", 128));
  QS_ASSIGN_OR_RETURN(f.in_channels, c.int_field("in_channels", 16));
  // diffusers: out_channels = out_channels or in_channels.
  QS_ASSIGN_OR_RETURN(f.out_channels, c.int_field("out_channels", f.in_channels));
  if (f.out_channels == 0) f.out_channels = f.in_channels;
  QS_ASSIGN_OR_RETURN(f.text_dim, c.int_field("text_dim", 4096));
  QS_ASSIGN_OR_RETURN(f.freq_dim, c.int_field("freq_dim", 256));
  QS_ASSIGN_OR_RETURN(f.ffn_dim, c.int_field("ffn_dim", 13824));
  QS_ASSIGN_OR_RETURN(f.num_layers, c.int_field("num_layers", 40));
  QS_ASSIGN_OR_RETURN(f.cross_attn_norm, c.bool_field("cross_attn_norm", true));
  QS_ASSIGN_OR_RETURN(double eps, c.number_field("eps", 1e-6));
  f.eps = static_cast<float>(eps);
  QS_ASSIGN_OR_RETURN(f.rope_max_seq_len, c.int_field("rope_max_seq_len", 1024));
  QS_ASSIGN_OR_RETURN(std::string qk_norm, c.string_field("qk_norm", "rms_norm_across_heads"));
  // diffusers' WanAttention always normalises q and k over the whole inner dim, whatever this
  // says; a config naming another norm was written for other code.
  if (qk_norm != "rms_norm_across_heads") {
    return unimplemented(where + "qk_norm '" + qk_norm +
                         "' (only rms_norm_across_heads, diffusers' Wan attention, is supported)");
  }
  if (f.patch_size.size() != 3) {
    return invalid_argument(where + "patch_size must hold three sizes (t, h, w)");
  }
  for (int64_t p : f.patch_size) {
    if (p <= 0 || p > 64) {
      return invalid_argument(where + "patch_size " + shape_string(f.patch_size) +
                              " out of range (each in [1, 64])");
    }
  }
  QS_RETURN_IF_ERROR(limits::check_at_most(f.num_attention_heads, limits::kMaxHeads,
                                           where + "num_attention_heads"));
  QS_RETURN_IF_ERROR(limits::check_at_most(f.attention_head_dim, limits::kMaxHeadDim,
                                           where + "attention_head_dim"));
  QS_RETURN_IF_ERROR(limits::check_at_most(f.num_layers, limits::kMaxLayers, where + "num_layers"));
  for (auto [key, v] : {std::pair<const char*, int64_t>{"in_channels", f.in_channels},
                        {"out_channels", f.out_channels},
                        {"text_dim", f.text_dim},
                        {"freq_dim", f.freq_dim},
                        {"ffn_dim", f.ffn_dim},
                        {"inner dim", f.inner_dim()}}) {
    QS_RETURN_IF_ERROR(limits::check_at_most(v, limits::kMaxHiddenDim, where + key));
    if (v <= 0) return invalid_argument(where + key + " " + std::to_string(v) + " is not positive");
  }
  if (f.num_attention_heads <= 0 || f.num_layers < 0) {
    return invalid_argument(where + "num_attention_heads " + std::to_string(f.num_attention_heads) +
                            ", num_layers " + std::to_string(f.num_layers) + " out of range");
  }
  // get_1d_rotary_pos_embed asserts an even dim per axis; the frame axis gets
  // head_dim - 4 * (head_dim / 6), even exactly when head_dim is.
  if (f.attention_head_dim <= 0 || f.attention_head_dim % 2 != 0) {
    return invalid_argument(where + "attention_head_dim " + std::to_string(f.attention_head_dim) +
                            " must be positive and even (3-D RoPE pairs)");
  }
  if (f.freq_dim <= 0 || f.freq_dim % 2 != 0) {
    return invalid_argument(where + "freq_dim " + std::to_string(f.freq_dim) +
                            " must be positive and even (cos and sin halves)");
  }
  if (f.rope_max_seq_len <= 0 || f.rope_max_seq_len > limits::kMaxContext) {
    return invalid_argument(where + "rope_max_seq_len " + std::to_string(f.rope_max_seq_len) +
                            " out of range");
  }
  if (!(f.eps > 0.0f) || !std::isfinite(f.eps)) {
    return invalid_argument(where + "eps must be a positive number");
  }
  return f;
}

Result<WanTransformer> WanTransformer::load(const std::string& dir) {
  WanTransformer t;
  QS_ASSIGN_OR_RETURN(t.weights_, models::Component::open(dir));
  const models::Component& c = t.weights_;
  QS_ASSIGN_OR_RETURN(t.config_, read_wan_transformer_config(c));
  const WanTransformerConfig& f = t.config_;
  const int64_t d = f.inner_dim(), p = f.patch_volume();
  const std::vector<int64_t>& ps = f.patch_size;
  {
    // Conv3d(kernel = stride = patch): each output is the dot product of the weight's
    // [C, pt, ph, pw] block with one patch, i.e. a linear over the flattened patch.
    QS_ASSIGN_OR_RETURN(Tensor w,
                        c.get("patch_embedding.weight", {d, f.in_channels, ps[0], ps[1], ps[2]}));
    w.shape = {d, f.in_channels * p};
    t.patch_embedding_.w = ops::LinearWeight(std::move(w));
    QS_ASSIGN_OR_RETURN(t.patch_embedding_.b, c.f32("patch_embedding.bias", {d}));
  }
  QS_ASSIGN_OR_RETURN(t.time_embedder_,
                      load_mlp_embedder(c, "condition_embedder.time_embedder", f.freq_dim, d));
  QS_ASSIGN_OR_RETURN(t.time_proj_, load_dense(c, "condition_embedder.time_proj", 6 * d, d));
  QS_ASSIGN_OR_RETURN(t.text_embedder_,
                      load_mlp_embedder(c, "condition_embedder.text_embedder", f.text_dim, d));
  for (int64_t i = 0; i < f.num_layers; ++i) {
    const std::string b = "blocks." + std::to_string(i);
    WanBlock blk;
    QS_ASSIGN_OR_RETURN(blk.scale_shift_table, c.f32(b + ".scale_shift_table", {1, 6, d}));
    QS_RETURN_IF_ERROR(load_wan_attention(c, b + ".attn1", d, &blk.q, &blk.k, &blk.v, &blk.out,
                                          &blk.norm_q, &blk.norm_k));
    QS_RETURN_IF_ERROR(load_wan_attention(c, b + ".attn2", d, &blk.q2, &blk.k2, &blk.v2, &blk.out2,
                                          &blk.norm_q2, &blk.norm_k2));
    if (f.cross_attn_norm) {
      QS_ASSIGN_OR_RETURN(blk.norm2_w, c.f32(b + ".norm2.weight", {d}));
      QS_ASSIGN_OR_RETURN(blk.norm2_b, c.f32(b + ".norm2.bias", {d}));
    }
    QS_ASSIGN_OR_RETURN(blk.ffn_in, load_dense(c, b + ".ffn.net.0.proj", f.ffn_dim, d));
    QS_ASSIGN_OR_RETURN(blk.ffn_out, load_dense(c, b + ".ffn.net.2", d, f.ffn_dim));
    t.blocks_.push_back(std::move(blk));
  }
  QS_ASSIGN_OR_RETURN(t.scale_shift_table_, c.f32("scale_shift_table", {1, 2, d}));
  QS_ASSIGN_OR_RETURN(t.proj_out_, load_dense(c, "proj_out", f.out_channels * p, d));
  return t;
}

Status WanTransformer::forward(const WanInputs& in, float* out, ThreadPool& pool) const {
  const WanTransformerConfig& f = config_;
  const int64_t B = in.batch, C = f.in_channels, Co = f.out_channels;
  const int64_t pt = f.patch_size[0], ph = f.patch_size[1], pw = f.patch_size[2];
  const int64_t P = f.patch_volume();
  const int64_t d = f.inner_dim(), hd = f.attention_head_dim, h = f.num_attention_heads;
  const std::string what = "wan transformer: ";
  if (B < 1) return invalid_argument(what + "batch " + std::to_string(B) + " (must be >= 1)");
  if (in.frames <= 0 || in.height <= 0 || in.width <= 0) {
    return invalid_argument(what + "latent grid " + std::to_string(in.frames) + "x" +
                            std::to_string(in.height) + "x" + std::to_string(in.width) +
                            " (frames, height and width must be positive)");
  }
  if (in.frames % pt != 0 || in.height % ph != 0 || in.width % pw != 0) {
    return invalid_argument(what + "latent grid " + std::to_string(in.frames) + "x" +
                            std::to_string(in.height) + "x" + std::to_string(in.width) +
                            " is not divisible by patch_size " + shape_string(f.patch_size));
  }
  if (in.n_text <= 0) {
    return invalid_argument(what + "n_text " + std::to_string(in.n_text) + " (must be >= 1)");
  }
  if (!in.latents || !in.timestep || !in.text) return invalid_argument(what + "missing input");
  QS_RETURN_IF_ERROR(
      limits::checked_numel({B, std::max(C, Co), in.frames, in.height, in.width}, what + "latents")
          .status());
  const int64_t F = in.frames / pt, H = in.height / ph, W = in.width / pw;
  if (std::max({F, H, W}) > f.rope_max_seq_len) {
    return invalid_argument(what + "patch grid " + std::to_string(F) + "x" + std::to_string(H) +
                            "x" + std::to_string(W) + " exceeds rope_max_seq_len " +
                            std::to_string(f.rope_max_seq_len));
  }
  const int64_t seq = F * H * W, R = B * seq, nt = in.n_text;
  QS_RETURN_IF_ERROR(
      limits::checked_numel({R, std::max({d, C * P, Co * P, f.ffn_dim})}, what + "activations")
          .status());
  QS_RETURN_IF_ERROR(
      limits::checked_numel({B, nt, std::max(d, f.text_dim)}, what + "text").status());

  // 1. Patch embedding: token (f, y, x) of item b is the [C, pt, ph, pw] block at
  // (f pt, y ph, x pw), flattened as the Conv3d weight is; tokens in (f, y, x) order, as
  // flatten(2) leaves them.
  std::vector<float> x(static_cast<size_t>(R * d));
  {
    std::vector<float> patches(static_cast<size_t>(R * C * P));
    const int64_t plane = in.height * in.width, vol = in.frames * plane;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t tok = 0; tok < seq; ++tok) {
        const int64_t fi = tok / (H * W), yi = (tok / W) % H, xi = tok % W;
        float* dst = patches.data() + (b * seq + tok) * C * P;
        for (int64_t ch = 0; ch < C; ++ch) {
          const float* src = in.latents + (b * C + ch) * vol;
          for (int64_t kt = 0; kt < pt; ++kt) {
            for (int64_t ky = 0; ky < ph; ++ky) {
              const float* row = src + (fi * pt + kt) * plane + (yi * ph + ky) * in.width + xi * pw;
              for (int64_t kx = 0; kx < pw; ++kx) *dst++ = row[kx];
            }
          }
        }
      }
    }
    QS_RETURN_IF_ERROR(run_dense(patch_embedding_, patches.data(), R, x.data(), pool));
  }

  // 2. WanTimeTextImageEmbedding: temb = time_embedder(Timesteps(t)), timestep_proj =
  // time_proj(SiLU(temb)) (per distinct timestep), text = text_embedder(text).
  const TimestepGroups tg = group_timesteps(in, seq);
  const int64_t U = static_cast<int64_t>(tg.values.size());
  std::vector<float> temb(static_cast<size_t>(U * d)), tproj(static_cast<size_t>(U * 6 * d));
  {
    std::vector<float> sinusoid(static_cast<size_t>(U * f.freq_dim));
    timestep_embedding(tg.values.data(), U, f.freq_dim, 1.0f, sinusoid.data());
    QS_RETURN_IF_ERROR(run_mlp_embedder(time_embedder_, EmbedderAct::kSilu, sinusoid.data(), U,
                                        temb.data(), pool));
    std::vector<float> act(temb);
    ops::silu(act.data(), U * d);
    QS_RETURN_IF_ERROR(run_dense(time_proj_, act.data(), U, tproj.data(), pool));
  }
  std::vector<float> ctx(static_cast<size_t>(B * nt * d));
  QS_RETURN_IF_ERROR(
      run_mlp_embedder(text_embedder_, EmbedderAct::kGeluTanh, in.text, B * nt, ctx.data(), pool));

  // 3. WanRotaryPosEmbed: per token the (frame, row, column) of its patch.
  std::vector<float> cos, sin, ids(static_cast<size_t>(seq * 3));
  for (int64_t tok = 0; tok < seq; ++tok) {
    ids[tok * 3 + 0] = static_cast<float>(tok / (H * W));
    ids[tok * 3 + 1] = static_cast<float>((tok / W) % H);
    ids[tok * 3 + 2] = static_cast<float>(tok % W);
  }
  axial_rope_tables(ids.data(), seq, f.rope_axes(), kWanRopeTheta, &cos, &sin);

  // 4. WanTransformerBlock. q is reused for every linear's output that is not kept.
  std::vector<float> nx(R * d), q(R * d), k(R * d), v(R * d), att(R * d);
  std::vector<float> kc(B * nt * d), vc(B * nt * d), mod(U * 6 * d);
  const int64_t chunk = std::min(R, kWanFfnChunkRows);
  std::vector<float> hidden(static_cast<size_t>(chunk * f.ffn_dim));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (tap_ != nullptr && tap_->conditioning) {
    std::vector<int64_t> mod_index(static_cast<size_t>(R));
    for (const ModGroup& g : tg.groups) {
      std::fill_n(mod_index.begin() + g.row0, g.rows, g.index);
    }
    WanBlockTap::Conditioning tc{
        B, seq, nt, U, tproj.data(), mod_index.data(), ctx.data(), cos.data(), sin.data()};
    QS_RETURN_IF_ERROR(tap_->conditioning(tc));
  }
  for (size_t bi = 0; bi <= blocks_.size(); ++bi) {
    if (tap_ != nullptr && tap_->block_input) {
      QS_RETURN_IF_ERROR(tap_->block_input(static_cast<int64_t>(bi), x.data()));
    }
    if (bi == blocks_.size()) break;
    const WanBlock& blk = blocks_[bi];
    // scale_shift_table + temb.float(): shift, scale, gate (attn1); shift, scale, gate (ffn).
    for (int64_t u = 0; u < U; ++u) {
      for (int64_t j = 0; j < 6 * d; ++j) {
        mod[u * 6 * d + j] = blk.scale_shift_table[j] + tproj[u * 6 * d + j];
      }
    }
    // Self-attention: q, k RMSNorm over the inner dim (across heads), RoPE, out, gated.
    std::copy(x.begin(), x.end(), nx.begin());
    modulate_groups(nx.data(), tg.groups, d, mod.data(), 6 * d, 0, d, f.eps);
    QS_RETURN_IF_ERROR(run_dense(blk.q, nx.data(), R, q.data(), pool));
    QS_RETURN_IF_ERROR(run_dense(blk.k, nx.data(), R, k.data(), pool));
    QS_RETURN_IF_ERROR(run_dense(blk.v, nx.data(), R, v.data(), pool));
    ops::rms_norm(q.data(), R, d, blk.norm_q.data(), f.eps, q.data());
    ops::rms_norm(k.data(), R, d, blk.norm_k.data(), f.eps, k.data());
    for (int64_t b = 0; b < B; ++b) {
      float* qb = q.data() + b * seq * d;
      float* kb = k.data() + b * seq * d;
      ops::rope_interleaved(qb, seq, d, h, hd, cos.data(), sin.data());
      ops::rope_interleaved(kb, seq, d, h, hd, cos.data(), sin.data());
      const ops::DenseAttentionShape shape{seq, seq, h, hd, d, d, d, d, scale};
      QS_RETURN_IF_ERROR(ops::dense_attention(qb, kb, v.data() + b * seq * d, shape,
                                              att.data() + b * seq * d, pool));
    }
    QS_RETURN_IF_ERROR(run_dense(blk.out, att.data(), R, q.data(), pool));
    gated_add_groups(x.data(), q.data(), tg.groups, d, mod.data(), 6 * d, 2 * d);

    // Cross-attention to the text: norm2, no RoPE, plain residual.
    if (f.cross_attn_norm) {
      ops::layer_norm(x.data(), R, d, blk.norm2_w.data(), blk.norm2_b.data(), f.eps, nx.data());
    } else {
      std::copy(x.begin(), x.end(), nx.begin());
    }
    QS_RETURN_IF_ERROR(run_dense(blk.q2, nx.data(), R, q.data(), pool));
    QS_RETURN_IF_ERROR(run_dense(blk.k2, ctx.data(), B * nt, kc.data(), pool));
    QS_RETURN_IF_ERROR(run_dense(blk.v2, ctx.data(), B * nt, vc.data(), pool));
    ops::rms_norm(q.data(), R, d, blk.norm_q2.data(), f.eps, q.data());
    ops::rms_norm(kc.data(), B * nt, d, blk.norm_k2.data(), f.eps, kc.data());
    for (int64_t b = 0; b < B; ++b) {
      const ops::DenseAttentionShape shape{seq, nt, h, hd, d, d, d, d, scale};
      QS_RETURN_IF_ERROR(ops::dense_attention(q.data() + b * seq * d, kc.data() + b * nt * d,
                                              vc.data() + b * nt * d, shape,
                                              att.data() + b * seq * d, pool));
    }
    QS_RETURN_IF_ERROR(run_dense(blk.out2, att.data(), R, q.data(), pool));
    ops::add_inplace(x.data(), q.data(), R * d);

    // FeedForward(activation_fn="gelu-approximate") on norm3 + modulation, gated.
    std::copy(x.begin(), x.end(), nx.begin());
    modulate_groups(nx.data(), tg.groups, d, mod.data(), 6 * d, 3 * d, 4 * d, f.eps);
    for (int64_t r0 = 0; r0 < R; r0 += chunk) {
      const int64_t m = std::min(chunk, R - r0);
      QS_RETURN_IF_ERROR(run_dense(blk.ffn_in, nx.data() + r0 * d, m, hidden.data(), pool));
      ops::gelu_tanh(hidden.data(), m * f.ffn_dim);
      QS_RETURN_IF_ERROR(run_dense(blk.ffn_out, hidden.data(), m, q.data() + r0 * d, pool));
    }
    gated_add_groups(x.data(), q.data(), tg.groups, d, mod.data(), 6 * d, 5 * d);
  }

  // 5. norm_out + (scale_shift_table + temb): shift, scale; proj_out; unpatchify.
  for (int64_t u = 0; u < U; ++u) {
    for (int64_t j = 0; j < 2 * d; ++j) {
      mod[u * 2 * d + j] = scale_shift_table_[j] + temb[u * d + j % d];
    }
  }
  modulate_groups(x.data(), tg.groups, d, mod.data(), 2 * d, 0, d, f.eps);
  std::vector<float> y(static_cast<size_t>(R * Co * P));
  QS_RETURN_IF_ERROR(run_dense(proj_out_, x.data(), R, y.data(), pool));
  // Token (fi, yi, xi)'s row is [pt, ph, pw, Co]; out is [B, Co, frames, height, width].
  const int64_t plane = in.height * in.width, vol = in.frames * plane;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t tok = 0; tok < seq; ++tok) {
      const int64_t fi = tok / (H * W), yi = (tok / W) % H, xi = tok % W;
      const float* src = y.data() + (b * seq + tok) * Co * P;
      for (int64_t kt = 0; kt < pt; ++kt) {
        for (int64_t ky = 0; ky < ph; ++ky) {
          for (int64_t kx = 0; kx < pw; ++kx, src += Co) {
            const int64_t at = (fi * pt + kt) * plane + (yi * ph + ky) * in.width + xi * pw + kx;
            for (int64_t ch = 0; ch < Co; ++ch) out[(b * Co + ch) * vol + at] = src[ch];
          }
        }
      }
    }
  }
  return ok_status();
}

std::vector<models::TensorSpec> wan_transformer_tensor_specs(const WanTransformerConfig& f) {
  const int64_t d = f.inner_dim(), p = f.patch_volume();
  std::vector<models::TensorSpec> t;
  auto linear = [&](const std::string& name, int64_t n, int64_t k) {
    t.push_back({name + ".weight", {n, k}, true});
    t.push_back({name + ".bias", {n}, false});
  };
  t.push_back({"patch_embedding.weight",
               {d, f.in_channels, f.patch_size[0], f.patch_size[1], f.patch_size[2]},
               false});
  t.push_back({"patch_embedding.bias", {d}, false});
  linear("condition_embedder.time_embedder.linear_1", d, f.freq_dim);
  linear("condition_embedder.time_embedder.linear_2", d, d);
  linear("condition_embedder.time_proj", 6 * d, d);
  linear("condition_embedder.text_embedder.linear_1", d, f.text_dim);
  linear("condition_embedder.text_embedder.linear_2", d, d);
  for (int64_t i = 0; i < f.num_layers; ++i) {
    const std::string b = "blocks." + std::to_string(i);
    t.push_back({b + ".scale_shift_table", {1, 6, d}, false});
    for (const char* a : {".attn1", ".attn2"}) {
      for (const char* m : {".to_q", ".to_k", ".to_v", ".to_out.0"}) linear(b + a + m, d, d);
      t.push_back({b + a + ".norm_q.weight", {d}, false});
      t.push_back({b + a + ".norm_k.weight", {d}, false});
    }
    if (f.cross_attn_norm) {
      t.push_back({b + ".norm2.weight", {d}, false});
      t.push_back({b + ".norm2.bias", {d}, false});
    }
    linear(b + ".ffn.net.0.proj", f.ffn_dim, d);
    linear(b + ".ffn.net.2", d, f.ffn_dim);
  }
  t.push_back({"scale_shift_table", {1, 2, d}, false});
  linear("proj_out", f.out_channels * p, d);
  return t;
}

size_t wan_transformer_activation_bytes(const WanTransformerConfig& f, int64_t batch, int64_t seq,
                                        int64_t n_text, int threads) {
  const int64_t d = f.inner_dim(), p = f.patch_volume(), rows = batch * seq;
  const int64_t chunk = std::min(rows, kWanFfnChunkRows);
  // Sized for two distinct timesteps per item: TI2V's image-conditioned run (0 on the first
  // frame, t elsewhere); every other run has one.
  const int64_t u = 2 * batch;
  // forward(): x, nx, q, k, v, att (6 rows x d); the feed-forward's hidden chunk; the text,
  // kc, vc; the proj_out rows; the timestep embeddings and modulation rows. The patches
  // (rows x C x P) are freed before the blocks and are smaller than what they allocate.
  const int64_t kept = 6 * rows * d + chunk * f.ffn_dim + 3 * batch * n_text * d +
                       rows * f.out_channels * p + u * (f.freq_dim + 2 * d + 12 * d);
  // RoPE cos and sin tables (seq x head_dim / 2 each) and the patch positions.
  const int64_t rope = seq * f.attention_head_dim + 3 * seq;
  // ops::dense_attention per call: k transposed (seq x d) and a 64-query score block per
  // thread (self-attention; cross-attention's n_text-long ones are smaller).
  const int64_t attention = seq * d + int64_t{threads} * 64 * std::max(seq, n_text);
  // The linear kernels' activation buffer for the widest input: bf16 values (2 bytes) plus
  // per-group sums, at most 3 bytes an input.
  const int64_t linear_bytes =
      3 * std::max({rows * d, chunk * f.ffn_dim, rows * f.in_channels * p});
  return static_cast<size_t>(4 * (kept + rope + attention) + linear_bytes);
}

}  // namespace qs::diffusion
