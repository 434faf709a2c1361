// diffusion: AutoencoderKL's encoder and decoder (see autoencoder_kl.h), module for module
// as diffusers' autoencoders/vae.py builds them (Encoder, Decoder, UNetMidBlock2D,
// ResnetBlock2D, Upsample2D, Downsample2D, the mid block's Attention).
#include "diffusion/autoencoder_kl.h"

#include <cmath>

#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/dense_attention.h"

namespace qs::diffusion {

namespace {

// ResnetBlock2D(eps=1e-6), the mid block's attention and conv_norm_out all use 1e-6.
constexpr float kEps = 1e-6f;

struct Image {
  std::vector<float> d;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t hw() const { return h * w; }
};

Result<Conv> load_conv(const models::Component& c, const std::string& p, int64_t c_in,
                       int64_t c_out, int64_t k) {
  Conv conv;
  conv.c_in = c_in, conv.c_out = c_out, conv.k = k;
  QS_ASSIGN_OR_RETURN(conv.w, c.f32(p + ".weight", {c_out, c_in, k, k}));
  QS_ASSIGN_OR_RETURN(conv.b, c.f32(p + ".bias", {c_out}));
  return conv;
}

Result<GroupNormWeights> load_norm(const models::Component& c, const std::string& p, int64_t ch) {
  GroupNormWeights g;
  QS_ASSIGN_OR_RETURN(g.w, c.f32(p + ".weight", {ch}));
  QS_ASSIGN_OR_RETURN(g.b, c.f32(p + ".bias", {ch}));
  return g;
}

Result<ResnetBlock> load_resnet(const models::Component& c, const std::string& p, int64_t c_in,
                                int64_t c_out) {
  ResnetBlock r;
  QS_ASSIGN_OR_RETURN(r.norm1, load_norm(c, p + ".norm1", c_in));
  QS_ASSIGN_OR_RETURN(r.conv1, load_conv(c, p + ".conv1", c_in, c_out, 3));
  QS_ASSIGN_OR_RETURN(r.norm2, load_norm(c, p + ".norm2", c_out));
  QS_ASSIGN_OR_RETURN(r.conv2, load_conv(c, p + ".conv2", c_out, c_out, 3));
  if (c_in != c_out) {
    QS_ASSIGN_OR_RETURN(r.shortcut, load_conv(c, p + ".conv_shortcut", c_in, c_out, 1));
  }
  return r;
}

Result<VaeMidBlock> load_mid(const models::Component& c, const std::string& p, int64_t ch,
                             bool attn) {
  VaeMidBlock m;
  QS_ASSIGN_OR_RETURN(m.res0, load_resnet(c, p + ".resnets.0", ch, ch));
  QS_ASSIGN_OR_RETURN(m.res1, load_resnet(c, p + ".resnets.1", ch, ch));
  m.has_attention = attn;
  if (attn) {
    const std::string a = p + ".attentions.0";
    QS_ASSIGN_OR_RETURN(m.attn.norm, load_norm(c, a + ".group_norm", ch));
    QS_ASSIGN_OR_RETURN(m.attn.q, c.linear(a + ".to_q", ch, ch, &m.attn.bq));
    QS_ASSIGN_OR_RETURN(m.attn.k, c.linear(a + ".to_k", ch, ch, &m.attn.bk));
    QS_ASSIGN_OR_RETURN(m.attn.v, c.linear(a + ".to_v", ch, ch, &m.attn.bv));
    QS_ASSIGN_OR_RETURN(m.attn.out, c.linear(a + ".to_out.0", ch, ch, &m.attn.bout));
  }
  return m;
}

// Conv2d(k, padding=k/2) (or the explicit padding of a downsample) of x.
Status conv(const Conv& cv, const Image& x, int64_t stride, bool pad_after_only, Image* y,
            ThreadPool& pool) {
  ops::Conv2dShape s{x.n, x.c, x.h, x.w, cv.c_out, cv.k, cv.k, stride};
  if (pad_after_only) {
    s.pad_bottom = s.pad_right = 1;  // Downsample2D(padding=0): F.pad(x, (0, 1, 0, 1))
  } else {
    s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = cv.k / 2;
  }
  y->n = x.n, y->c = cv.c_out, y->h = s.out_h(), y->w = s.out_w();
  y->d.assign(static_cast<size_t>(y->n * y->c * y->hw()), 0.0f);
  return ops::conv2d(x.d.data(), s, cv.w.data(), cv.b.data(), y->d.data(), pool);
}

void norm_silu(const GroupNormWeights& g, int64_t groups, Image* x) {
  ops::group_norm(x->d.data(), x->n, x->c, x->hw(), groups, g.w.data(), g.b.data(), kEps,
                  x->d.data());
  ops::silu(x->d.data(), static_cast<int64_t>(x->d.size()));
}

// ResnetBlock2D: shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x)))))).
Status resnet(const ResnetBlock& r, int64_t groups, Image* x, ThreadPool& pool) {
  Image h = *x, t;
  norm_silu(r.norm1, groups, &h);
  QS_RETURN_IF_ERROR(conv(r.conv1, h, 1, false, &t, pool));
  norm_silu(r.norm2, groups, &t);
  QS_RETURN_IF_ERROR(conv(r.conv2, t, 1, false, &h, pool));
  if (!r.shortcut.w.empty()) {
    QS_RETURN_IF_ERROR(conv(r.shortcut, *x, 1, false, &t, pool));
    *x = std::move(t);
  }
  for (size_t i = 0; i < h.d.size(); ++i) x->d[i] += h.d[i];
  return ok_status();
}

// Attention(heads=1, dim_head=c, residual_connection=True) over the h*w pixels.
Status attention(const VaeAttention& a, int64_t groups, Image* x, ThreadPool& pool) {
  const int64_t c = x->c, hw = x->hw();
  std::vector<float> nx(x->d.size());
  ops::group_norm(x->d.data(), x->n, c, hw, groups, a.norm.w.data(), a.norm.b.data(), kEps,
                  nx.data());
  std::vector<float> rows(static_cast<size_t>(hw * c)), q(rows.size()), k(rows.size()),
      v(rows.size()), o(rows.size()), y(rows.size());
  for (int64_t b = 0; b < x->n; ++b) {
    const float* nb = nx.data() + b * c * hw;
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < hw; ++p) rows[p * c + ch] = nb[ch * hw + p];
    }
    QS_RETURN_IF_ERROR(ops::linear(rows.data(), hw, a.q, a.bq.data(), q.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(rows.data(), hw, a.k, a.bk.data(), k.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(rows.data(), hw, a.v, a.bv.data(), v.data(), pool));
    ops::DenseAttentionShape s{hw, hw, 1, c, c, c, c, c, 1.0f / std::sqrt(static_cast<float>(c))};
    QS_RETURN_IF_ERROR(ops::dense_attention(q.data(), k.data(), v.data(), s, o.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(o.data(), hw, a.out, a.bout.data(), y.data(), pool));
    float* xb = x->d.data() + b * c * hw;
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < hw; ++p) xb[ch * hw + p] += y[p * c + ch];
    }
  }
  return ok_status();
}

Status mid_block(const VaeMidBlock& m, int64_t groups, Image* x, ThreadPool& pool) {
  QS_RETURN_IF_ERROR(resnet(m.res0, groups, x, pool));
  if (m.has_attention) QS_RETURN_IF_ERROR(attention(m.attn, groups, x, pool));
  return resnet(m.res1, groups, x, pool);
}

}  // namespace

Result<VaeConfig> read_vae_config(const models::Component& c) {
  VaeConfig v;
  QS_ASSIGN_OR_RETURN(v.in_channels, c.int_field("in_channels", 3));
  QS_ASSIGN_OR_RETURN(v.out_channels, c.int_field("out_channels", 3));
  QS_ASSIGN_OR_RETURN(v.latent_channels, c.int_field("latent_channels", 4));
  QS_ASSIGN_OR_RETURN(v.block_out_channels, c.int_list_field("block_out_channels", {64}));
  QS_ASSIGN_OR_RETURN(v.layers_per_block, c.int_field("layers_per_block", 1));
  QS_ASSIGN_OR_RETURN(v.norm_num_groups, c.int_field("norm_num_groups", 32));
  QS_ASSIGN_OR_RETURN(v.mid_block_add_attention, c.bool_field("mid_block_add_attention", true));
  QS_ASSIGN_OR_RETURN(v.use_quant_conv, c.bool_field("use_quant_conv", true));
  QS_ASSIGN_OR_RETURN(v.use_post_quant_conv, c.bool_field("use_post_quant_conv", true));
  QS_ASSIGN_OR_RETURN(v.scaling_factor, c.number_field("scaling_factor", 0.18215));
  QS_ASSIGN_OR_RETURN(v.shift_factor, c.number_field("shift_factor", 0.0));
  QS_ASSIGN_OR_RETURN(std::string act, c.string_field("act_fn", "silu"));
  const std::string where = c.dir() + "/config.json: ";
  if (act != "silu") return unimplemented(where + "act_fn \"" + act + "\" (only silu)");
  if (v.block_out_channels.empty() || v.block_out_channels.size() > 8) {
    return invalid_argument(where + "block_out_channels must list 1 to 8 sizes");
  }
  for (int64_t ch : v.block_out_channels) {
    if (ch <= 0 || ch > 65536 || v.norm_num_groups <= 0 || ch % v.norm_num_groups != 0) {
      return invalid_argument(where +
                              "block_out_channels must be positive multiples of "
                              "norm_num_groups " +
                              std::to_string(v.norm_num_groups));
    }
  }
  if (v.in_channels <= 0 || v.out_channels <= 0 || v.latent_channels <= 0 ||
      v.latent_channels > 4096 || v.layers_per_block <= 0 || v.layers_per_block > 64 ||
      !(v.scaling_factor > 0)) {
    return invalid_argument(where + "a size or scaling_factor is out of range");
  }
  for (const char* key : {"down_block_types", "up_block_types"}) {
    if (!c.config().contains(key)) continue;
    const auto& types = c.config()[key];
    const char* want = key[0] == 'd' ? "DownEncoderBlock2D" : "UpDecoderBlock2D";
    if (!types.is_array() || types.size() != v.block_out_channels.size()) {
      return invalid_argument(where + key + " must list one block per block_out_channels entry");
    }
    for (const auto& t : types) {
      if (t != want) return unimplemented(where + key + " " + t.dump() + " (only " + want + ")");
    }
  }
  return v;
}

Result<AutoencoderKL> AutoencoderKL::load(const std::string& dir) {
  AutoencoderKL vae;
  QS_ASSIGN_OR_RETURN(models::Component c, models::Component::open(dir));
  QS_ASSIGN_OR_RETURN(vae.config_, read_vae_config(c));
  const VaeConfig& v = vae.config_;
  const auto& boc = v.block_out_channels;
  const int64_t levels = static_cast<int64_t>(boc.size()), top = boc.back(), L = v.latent_channels;

  // Decoder: conv_in, mid block, up blocks from the deepest level, norm, conv_out.
  if (v.use_post_quant_conv) {
    QS_ASSIGN_OR_RETURN(vae.post_quant_conv_, load_conv(c, "post_quant_conv", L, L, 1));
  }
  QS_ASSIGN_OR_RETURN(vae.dec_conv_in_, load_conv(c, "decoder.conv_in", L, top, 3));
  QS_ASSIGN_OR_RETURN(vae.dec_mid_,
                      load_mid(c, "decoder.mid_block", top, v.mid_block_add_attention));
  int64_t ch = top;
  for (int64_t i = 0; i < levels; ++i) {
    const std::string p = "decoder.up_blocks." + std::to_string(i);
    const int64_t out = boc[levels - 1 - i];
    VaeLevel lvl;
    for (int64_t r = 0; r <= v.layers_per_block; ++r) {
      QS_ASSIGN_OR_RETURN(ResnetBlock rb, load_resnet(c, p + ".resnets." + std::to_string(r),
                                                      r == 0 ? ch : out, out));
      lvl.resnets.push_back(std::move(rb));
    }
    lvl.resample = i != levels - 1;
    if (lvl.resample) {
      QS_ASSIGN_OR_RETURN(lvl.resample_conv, load_conv(c, p + ".upsamplers.0.conv", out, out, 3));
    }
    vae.up_.push_back(std::move(lvl));
    ch = out;
  }
  QS_ASSIGN_OR_RETURN(vae.dec_norm_out_, load_norm(c, "decoder.conv_norm_out", boc[0]));
  QS_ASSIGN_OR_RETURN(vae.dec_conv_out_,
                      load_conv(c, "decoder.conv_out", boc[0], v.out_channels, 3));

  // Encoder, when the checkpoint has one (decoder-only VAE files exist).
  vae.has_encoder_ = c.has("encoder.conv_in.weight");
  if (!vae.has_encoder_) return vae;
  QS_ASSIGN_OR_RETURN(vae.enc_conv_in_, load_conv(c, "encoder.conv_in", v.in_channels, boc[0], 3));
  ch = boc[0];
  for (int64_t i = 0; i < levels; ++i) {
    const std::string p = "encoder.down_blocks." + std::to_string(i);
    VaeLevel lvl;
    for (int64_t r = 0; r < v.layers_per_block; ++r) {
      QS_ASSIGN_OR_RETURN(ResnetBlock rb, load_resnet(c, p + ".resnets." + std::to_string(r),
                                                      r == 0 ? ch : boc[i], boc[i]));
      lvl.resnets.push_back(std::move(rb));
    }
    lvl.resample = i != levels - 1;
    if (lvl.resample) {
      QS_ASSIGN_OR_RETURN(lvl.resample_conv,
                          load_conv(c, p + ".downsamplers.0.conv", boc[i], boc[i], 3));
    }
    vae.down_.push_back(std::move(lvl));
    ch = boc[i];
  }
  QS_ASSIGN_OR_RETURN(vae.enc_mid_,
                      load_mid(c, "encoder.mid_block", top, v.mid_block_add_attention));
  QS_ASSIGN_OR_RETURN(vae.enc_norm_out_, load_norm(c, "encoder.conv_norm_out", top));
  QS_ASSIGN_OR_RETURN(vae.enc_conv_out_, load_conv(c, "encoder.conv_out", top, 2 * L, 3));
  if (v.use_quant_conv) {
    QS_ASSIGN_OR_RETURN(vae.quant_conv_, load_conv(c, "quant_conv", 2 * L, 2 * L, 1));
  }
  return vae;
}

Status AutoencoderKL::decode(const float* z, int64_t n, int64_t h, int64_t w,
                             std::vector<float>* image, ThreadPool& pool) const {
  const VaeConfig& v = config_;
  if (n <= 0 || h <= 0 || w <= 0 || h > 16384 || w > 16384) {
    return invalid_argument("vae decode: bad latent size");
  }
  Image x{std::vector<float>(z, z + n * v.latent_channels * h * w), n, v.latent_channels, h, w};
  Image t;
  if (v.use_post_quant_conv) {
    QS_RETURN_IF_ERROR(conv(post_quant_conv_, x, 1, false, &t, pool));
    x = std::move(t);
  }
  QS_RETURN_IF_ERROR(conv(dec_conv_in_, x, 1, false, &t, pool));
  x = std::move(t);
  QS_RETURN_IF_ERROR(mid_block(dec_mid_, v.norm_num_groups, &x, pool));
  for (const VaeLevel& lvl : up_) {
    for (const ResnetBlock& r : lvl.resnets) {
      QS_RETURN_IF_ERROR(resnet(r, v.norm_num_groups, &x, pool));
    }
    if (lvl.resample) {  // Upsample2D: nearest 2x, then a 3x3 convolution
      Image up{std::vector<float>(x.d.size() * 4), x.n, x.c, 2 * x.h, 2 * x.w};
      ops::upsample_nearest2x(x.d.data(), x.n, x.c, x.h, x.w, up.d.data());
      QS_RETURN_IF_ERROR(conv(lvl.resample_conv, up, 1, false, &x, pool));
    }
  }
  norm_silu(dec_norm_out_, v.norm_num_groups, &x);
  QS_RETURN_IF_ERROR(conv(dec_conv_out_, x, 1, false, &t, pool));
  *image = std::move(t.d);
  return ok_status();
}

Status AutoencoderKL::encode_mean(const float* image, int64_t n, int64_t h, int64_t w,
                                  std::vector<float>* mean, ThreadPool& pool) const {
  const VaeConfig& v = config_;
  if (!has_encoder_) return unimplemented("vae: this checkpoint has no encoder");
  if (n <= 0 || h <= 0 || w <= 0 || h > 16384 || w > 16384 || h % v.scale() != 0 ||
      w % v.scale() != 0) {
    return invalid_argument("vae encode: the image size must be a positive multiple of " +
                            std::to_string(v.scale()));
  }
  Image x{std::vector<float>(image, image + n * v.in_channels * h * w), n, v.in_channels, h, w};
  Image t;
  QS_RETURN_IF_ERROR(conv(enc_conv_in_, x, 1, false, &t, pool));
  x = std::move(t);
  for (const VaeLevel& lvl : down_) {
    for (const ResnetBlock& r : lvl.resnets) {
      QS_RETURN_IF_ERROR(resnet(r, v.norm_num_groups, &x, pool));
    }
    if (lvl.resample) {
      QS_RETURN_IF_ERROR(conv(lvl.resample_conv, x, 2, true, &t, pool));
      x = std::move(t);
    }
  }
  QS_RETURN_IF_ERROR(mid_block(enc_mid_, v.norm_num_groups, &x, pool));
  norm_silu(enc_norm_out_, v.norm_num_groups, &x);
  QS_RETURN_IF_ERROR(conv(enc_conv_out_, x, 1, false, &t, pool));
  if (v.use_quant_conv) {
    QS_RETURN_IF_ERROR(conv(quant_conv_, t, 1, false, &x, pool));
    t = std::move(x);
  }
  // moments [n, 2L, h', w']: the mean is the first L channels of each item.
  const int64_t L = v.latent_channels, hw = t.hw();
  mean->resize(static_cast<size_t>(n * L * hw));
  for (int64_t b = 0; b < n; ++b) {
    std::copy(t.d.begin() + b * 2 * L * hw, t.d.begin() + (b * 2 * L + L) * hw,
              mean->begin() + b * L * hw);
  }
  return ok_status();
}

}  // namespace qs::diffusion
