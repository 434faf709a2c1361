// diffusion: AutoencoderKLWan's forward (see autoencoder_kl_wan.h; its config, level widths and
// memory estimate are autoencoder_kl_wan_config.cc), module for module as diffusers'
// autoencoders/autoencoder_kl_wan.py builds it: WanCausalConv3d, WanRMS_norm,
// WanResidualBlock, WanAttentionBlock, WanResample, WanMidBlock, WanUpBlock / WanResidualUpBlock
// (DupUp3D), the flat encoder list / WanResidualDownBlock (AvgDown3D), patchify / unpatchify,
// and _decode / _encode's chunk loops with their feature caches.
#include "diffusion/autoencoder_kl_wan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/limits.h"
#include "ops/conv3d.h"
#include "ops/dense_attention.h"
#include "ops/gemm.h"

namespace qs::diffusion {

namespace {
// A namespace of its own: the room compiles in unity batches, where the FLUX VAE's helpers
// (attention, mid_block, ...) share the anonymous namespace.
namespace wan_vae {

// F.normalize's eps: x / max(||x||, 1e-12).
constexpr float kNormEps = 1e-12f;
constexpr int64_t kCacheFrames = kWanVaeCacheFrames;
// _encode: the first frame alone, then chunks of this many frames.
constexpr int64_t kEncodeChunk = 4;
constexpr int64_t kMaxSide = kWanVaeMaxSide;

// v holds n floats (their values unspecified). A larger buffer is allocated at exactly n after
// the old one is freed: vector::resize would copy the old values and grow geometrically (up
// to twice n), holding both buffers meanwhile.
void resize_exact(std::vector<float>* v, int64_t n) {
  if (static_cast<size_t>(n) > v->capacity()) std::vector<float>().swap(*v);
  v->resize(static_cast<size_t>(n));
}

// One chunk's activations [c, t, h, w].
struct Video {
  std::vector<float> d;
  int64_t c = 0, t = 0, h = 0, w = 0;
  int64_t hw() const { return h * w; }
  int64_t numel() const { return c * t * h * w; }
  void reshape(int64_t c_, int64_t t_, int64_t h_, int64_t w_) {
    c = c_, t = t_, h = h_, w = w_;
    resize_exact(&d, numel());
  }
};

// The frames of a convolution's input that the next chunk sees before its own ([c, t, h, w],
// t <= kCacheFrames), and whether the resample that owns it has run once (the "Rep" marker of
// upsample3d; downsample3d's first chunk).
struct FrameCache {
  std::vector<float> d;
  int64_t t = 0;
  bool started = false;
};
using Caches = std::vector<FrameCache>;

// ---- loading ----

struct Loader {
  const models::Component& c;
  int* n_caches;

  // A WanCausalConv3d with a cubic kernel k (1 or 3), given a cache slot when k > 1.
  Result<WanConv> causal(const std::string& p, int64_t c_in, int64_t c_out, int64_t k) const {
    return conv(p, c_in, c_out, k, k, k, false, k > 1);
  }
  Result<WanConv> conv(const std::string& p, int64_t c_in, int64_t c_out, int64_t kt, int64_t kh,
                       int64_t kw, bool stored_2d, bool cached) const {
    WanConv cv;
    cv.c_in = c_in, cv.c_out = c_out, cv.kt = kt, cv.kh = kh, cv.kw = kw;
    std::vector<int64_t> shape = {c_out, c_in, kt, kh, kw};
    if (stored_2d) shape = {c_out, c_in, kh, kw};
    QS_ASSIGN_OR_RETURN(cv.w, c.f32(p + ".weight", shape));
    QS_ASSIGN_OR_RETURN(cv.b, c.f32(p + ".bias", {c_out}));
    if (cached) cv.cache = (*n_caches)++;
    return cv;
  }
  Result<std::vector<float>> gamma(const std::string& p, int64_t ch, bool image) const {
    std::vector<int64_t> shape = {ch, 1, 1, 1};
    if (image) shape = {ch, 1, 1};  // WanRMS_norm(images=True): the attention's
    return c.f32(p + ".gamma", shape);
  }
  Result<WanResBlock> res(const std::string& p, int64_t c_in, int64_t c_out) const {
    WanResBlock r;
    QS_ASSIGN_OR_RETURN(r.gamma1, gamma(p + ".norm1", c_in, false));
    QS_ASSIGN_OR_RETURN(r.conv1, causal(p + ".conv1", c_in, c_out, 3));
    QS_ASSIGN_OR_RETURN(r.gamma2, gamma(p + ".norm2", c_out, false));
    QS_ASSIGN_OR_RETURN(r.conv2, causal(p + ".conv2", c_out, c_out, 3));
    if (c_in != c_out) {
      QS_ASSIGN_OR_RETURN(r.shortcut, causal(p + ".conv_shortcut", c_in, c_out, 1));
    }
    return r;
  }
  Result<WanMidBlock> mid(const std::string& p, int64_t ch) const {
    WanMidBlock m;
    QS_ASSIGN_OR_RETURN(m.res0, res(p + ".resnets.0", ch, ch));
    const std::string a = p + ".attentions.0";
    QS_ASSIGN_OR_RETURN(m.attn.gamma, gamma(a + ".norm", ch, true));
    QS_ASSIGN_OR_RETURN(m.attn.qkv, conv(a + ".to_qkv", ch, 3 * ch, 1, 1, 1, true, false));
    QS_ASSIGN_OR_RETURN(m.attn.proj, conv(a + ".proj", ch, ch, 1, 1, 1, true, false));
    QS_ASSIGN_OR_RETURN(m.res1, res(p + ".resnets.1", ch, ch));
    return m;
  }
  // WanResample(dim, mode, upsample_out_dim = out_dim).
  Result<WanResample> resample(const std::string& p, WanResampleMode mode, int64_t dim,
                               int64_t out_dim) const {
    WanResample r;
    r.mode = mode;
    const bool up = mode == WanResampleMode::kUp2d || mode == WanResampleMode::kUp3d;
    QS_ASSIGN_OR_RETURN(r.conv,
                        conv(p + ".resample.1", dim, up ? out_dim : dim, 1, 3, 3, true, false));
    if (mode == WanResampleMode::kUp3d || mode == WanResampleMode::kDown3d) {
      const int64_t tc_out = mode == WanResampleMode::kUp3d ? 2 * dim : dim;
      QS_ASSIGN_OR_RETURN(r.time_conv, conv(p + ".time_conv", dim, tc_out, 3, 1, 1, false, false));
      r.cache = (*n_caches)++;
      // upsample3d's time convolution is causal with the usual cache (after its first chunk);
      // downsample3d runs its own unpadded one (resample()).
      if (mode == WanResampleMode::kUp3d) r.time_conv.cache = r.cache;
    }
    return r;
  }
};

// ---- per-chunk ops ----

// Per pixel across channels: y = x / max(||x||, eps) * sqrt(c) * gamma, then SiLU when asked
// (WanRMS_norm + the blocks' nonlinearity). x and y: c planes of n_pix floats, x_stride and
// y_stride apart (so y can be the tail of a buffer that starts with cached frames).
void rms_norm(const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t c,
              int64_t n_pix, const float* gamma, bool silu, ThreadPool& pool) {
  const float scale = std::sqrt(static_cast<float>(c));
  constexpr int64_t kBlock = 512;
  pool.parallel_for((n_pix + kBlock - 1) / kBlock, [&](int64_t b0, int64_t b1) {
    float inv[kBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t p0 = b * kBlock, np = std::min(kBlock, n_pix - p0);
      std::fill(inv, inv + np, 0.0f);
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* xs = x + ch * x_stride + p0;
        for (int64_t i = 0; i < np; ++i) inv[i] += xs[i] * xs[i];
      }
      for (int64_t i = 0; i < np; ++i) inv[i] = scale / std::max(std::sqrt(inv[i]), kNormEps);
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* xs = x + ch * x_stride + p0;
        float* ys = y + ch * y_stride + p0;
        for (int64_t i = 0; i < np; ++i) {
          const float v = xs[i] * inv[i] * gamma[ch];
          ys[i] = silu ? v / (1.0f + std::exp(-v)) : v;
        }
      }
    }
  });
}

// y += x elementwise.
void add_into(float* y, const float* x, int64_t n, ThreadPool& pool) {
  pool.parallel_for(
      n,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
      },
      int64_t{1} << 14);
}

// Copies `frames` floats per channel from src (channels src_stride apart) to dst (dst_stride
// apart), channels over the pool: at 480x832 one call moves hundreds of MB.
void copy_planes(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                 int64_t channels, int64_t frames, ThreadPool& pool) {
  pool.parallel_for(channels, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      std::memcpy(dst + ch * dst_stride, src + ch * src_stride,
                  static_cast<size_t>(frames) * sizeof(float));
    }
  });
}

// Copies the last min(n, v.t) frames of v into the cache.
void keep_last(const Video& v, int64_t n, FrameCache* fc, ThreadPool& pool) {
  n = std::min(n, v.t);
  fc->t = n;
  resize_exact(&fc->d, v.c * n * v.hw());
  copy_planes(v.d.data() + (v.t - n) * v.hw(), v.t * v.hw(), fc->d.data(), n * v.hw(), v.c,
              n * v.hw(), pool);
}

// WanCausalConv3d(x, cache): the cached frames, then x (through RMS norm + SiLU with `gamma`
// when given), zero-padded in front to kt - 1 frames of history and by kh / 2, kw / 2 in
// space; the cache then keeps the last kCacheFrames frames of that input, as diffusers'
// cache_x does. A 1x1x1 convolution has neither padding nor cache.
Status causal_conv(const WanConv& cv, const Video& x, const std::vector<float>* gamma,
                   Caches& caches, Video* y, ThreadPool& pool) {
  FrameCache* fc = cv.cache >= 0 ? &caches[static_cast<size_t>(cv.cache)] : nullptr;
  const int64_t have = fc ? fc->t : 0, hw = x.hw();
  const Video* in = &x;
  Video joined;
  if (have > 0 || gamma) {
    joined.reshape(x.c, have + x.t, x.h, x.w);
    const int64_t stride = joined.t * hw;
    if (have > 0)
      copy_planes(fc->d.data(), have * hw, joined.d.data(), stride, x.c, have * hw, pool);
    float* tail = joined.d.data() + have * hw;
    if (gamma) {
      rms_norm(x.d.data(), x.t * hw, tail, stride, x.c, x.t * hw, gamma->data(), true, pool);
    } else {
      copy_planes(x.d.data(), x.t * hw, tail, stride, x.c, x.t * hw, pool);
    }
    in = &joined;
  }
  ops::Conv3dShape s{1, in->c, in->t, in->h, in->w, cv.c_out, cv.kt, cv.kh, cv.kw};
  s.pad_front = cv.kt - 1 - have;
  s.pad_top = s.pad_bottom = cv.kh / 2;
  s.pad_left = s.pad_right = cv.kw / 2;
  y->reshape(cv.c_out, s.out_t(), s.out_h(), s.out_w());
  QS_RETURN_IF_ERROR(ops::conv3d(in->d.data(), s, cv.w.data(), cv.b.data(), y->d.data(), pool));
  if (fc) keep_last(*in, kCacheFrames, fc, pool);
  return ok_status();
}

Status res_block(const WanResBlock& r, Video* x, Caches& caches, ThreadPool& pool) {
  Video a, b;
  QS_RETURN_IF_ERROR(causal_conv(r.conv1, *x, &r.gamma1, caches, &a, pool));
  QS_RETURN_IF_ERROR(causal_conv(r.conv2, a, &r.gamma2, caches, &b, pool));
  if (r.shortcut.w.empty()) {
    add_into(x->d.data(), b.d.data(), x->numel(), pool);
    return ok_status();
  }
  QS_RETURN_IF_ERROR(causal_conv(r.shortcut, *x, nullptr, caches, &a, pool));
  add_into(b.d.data(), a.d.data(), b.numel(), pool);
  *x = std::move(b);
  return ok_status();
}

// WanAttentionBlock on each frame: x += proj(attention(qkv(norm(x)))), one head of c channels
// over the h * w pixels, scaled by 1 / sqrt(c) (F.scaled_dot_product_attention's default).
Status attention(const WanAttention& a, Video* x, ThreadPool& pool) {
  const int64_t c = x->c, hw = x->hw(), thw = x->t * hw;
  std::vector<float> xn(static_cast<size_t>(c * hw)), qkv(static_cast<size_t>(hw * 3 * c));
  std::vector<float> o(static_cast<size_t>(hw * c)), y(static_cast<size_t>(c * hw));
  for (int64_t f = 0; f < x->t; ++f) {
    float* xf = x->d.data() + f * hw;  // channel ch at xf + ch * thw
    rms_norm(xf, thw, xn.data(), hw, c, hw, a.gamma.data(), false, pool);
    // qkv[p, j] = sum_ch xn[ch, p] W[j, ch] + b[j]: A = xn^T, B = W^T, both read in place.
    kernels::GemmArgs g{xn.data(), 1,     hw, a.qkv.w.data(), 1, qkv.data(), 3 * c,
                        hw,        3 * c, c,  false,          c};
    QS_RETURN_IF_ERROR(ops::gemm(g, &pool));
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t j = 0; j < 3 * c; ++j) qkv[p * 3 * c + j] += a.qkv.b[j];
    }
    const ops::DenseAttentionShape s{
        hw, hw, 1, c, 3 * c, 3 * c, 3 * c, c, 1.0f / std::sqrt(static_cast<float>(c))};
    QS_RETURN_IF_ERROR(
        ops::dense_attention(qkv.data(), qkv.data() + c, qkv.data() + 2 * c, s, o.data(), pool));
    // y[co, p] = sum_ci Wp[co, ci] o[p, ci]: B = o^T.
    kernels::GemmArgs pg{a.proj.w.data(), c, 1, o.data(), 1, y.data(), hw, c, hw, c, false, c};
    QS_RETURN_IF_ERROR(ops::gemm(pg, &pool));
    for (int64_t ch = 0; ch < c; ++ch) {
      float* dst = xf + ch * thw;
      const float* src = y.data() + ch * hw;
      const float bias = a.proj.b[ch];
      for (int64_t p = 0; p < hw; ++p) dst[p] += src[p] + bias;
    }
  }
  return ok_status();
}

Status mid_block(const WanMidBlock& m, Video* x, Caches& caches, ThreadPool& pool) {
  QS_RETURN_IF_ERROR(res_block(m.res0, x, caches, pool));
  QS_RETURN_IF_ERROR(attention(m.attn, x, pool));
  return res_block(m.res1, x, caches, pool);
}

// A 3x3 nn.Conv2d on every frame (kt = 1): "same" padding (upsampling) or stride 2 after
// ZeroPad2d((0, 1, 0, 1)) (downsampling).
Status frame_conv(const WanConv& cv, const Video& x, bool down, Video* y, ThreadPool& pool) {
  ops::Conv3dShape s{1, x.c, x.t, x.h, x.w, cv.c_out, 1, 3, 3};
  if (down) {
    s.stride_h = s.stride_w = 2;
    s.pad_bottom = s.pad_right = 1;
  } else {
    s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = 1;
  }
  y->reshape(cv.c_out, s.out_t(), s.out_h(), s.out_w());
  return ops::conv3d(x.d.data(), s, cv.w.data(), cv.b.data(), y->d.data(), pool);
}

Status resample(const WanResample& r, Video* x, Caches& caches, ThreadPool& pool) {
  Video y;
  switch (r.mode) {
    case WanResampleMode::kNone:
      return ok_status();
    case WanResampleMode::kUp3d: {
      // The first chunk passes without the time convolution (diffusers marks its cache "Rep")
      // and leaves no frames behind; later chunks run it causally from zeros.
      FrameCache& fc = caches[static_cast<size_t>(r.cache)];
      if (!fc.started) {
        fc.started = true;
      } else {
        Video tc;
        QS_RETURN_IF_ERROR(causal_conv(r.time_conv, *x, nullptr, caches, &tc, pool));
        // [2c, t] -> [c, 2t]: frame 2i + s of channel ch is output channel s * c + ch at i.
        const int64_t c = x->c, hw = x->hw();
        y.reshape(c, 2 * tc.t, x->h, x->w);
        pool.parallel_for(c, [&](int64_t c0, int64_t c1) {
          for (int64_t ch = c0; ch < c1; ++ch) {
            for (int64_t i = 0; i < 2 * tc.t; ++i) {
              std::copy_n(tc.d.data() + (((i % 2) * c + ch) * tc.t + i / 2) * hw, hw,
                          y.d.data() + (ch * y.t + i) * hw);
            }
          }
        });
        *x = std::move(y);
      }
      [[fallthrough]];
    }
    case WanResampleMode::kUp2d: {
      // nearest-exact at scale 2 is plain nearest: output pixel i reads input i / 2.
      Video up;
      up.reshape(x->c, x->t, 2 * x->h, 2 * x->w);
      pool.parallel_for(x->c * x->t, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const float* src = x->d.data() + p * x->hw();
          float* dst = up.d.data() + p * up.hw();
          for (int64_t i = 0; i < up.h; ++i) {
            for (int64_t j = 0; j < up.w; ++j) dst[i * up.w + j] = src[(i / 2) * x->w + j / 2];
          }
        }
      });
      *x = Video();
      QS_RETURN_IF_ERROR(frame_conv(r.conv, up, false, x, pool));
      return ok_status();
    }
    case WanResampleMode::kDown2d:
    case WanResampleMode::kDown3d: {
      QS_RETURN_IF_ERROR(frame_conv(r.conv, *x, true, &y, pool));
      *x = std::move(y);
      if (r.mode == WanResampleMode::kDown2d) return ok_status();
      // The first chunk keeps its last frame and passes; later ones see that frame before
      // their own through the stride-2 time convolution, without padding.
      FrameCache& fc = caches[static_cast<size_t>(r.cache)];
      if (!fc.started) {
        fc.started = true;
        keep_last(*x, 1, &fc, pool);
        return ok_status();
      }
      Video joined;
      joined.reshape(x->c, fc.t + x->t, x->h, x->w);
      const int64_t hw = x->hw();
      copy_planes(fc.d.data(), fc.t * hw, joined.d.data(), joined.t * hw, x->c, fc.t * hw, pool);
      copy_planes(x->d.data(), x->t * hw, joined.d.data() + fc.t * hw, joined.t * hw, x->c,
                  x->t * hw, pool);
      keep_last(*x, 1, &fc, pool);
      ops::Conv3dShape s{1, joined.c, joined.t, joined.h, joined.w, r.time_conv.c_out, 3, 1, 1};
      s.stride_t = 2;
      y.reshape(r.time_conv.c_out, s.out_t(), x->h, x->w);
      QS_RETURN_IF_ERROR(ops::conv3d(joined.d.data(), s, r.time_conv.w.data(), r.time_conv.b.data(),
                                     y.d.data(), pool));
      *x = std::move(y);
      return ok_status();
    }
  }
  return ok_status();
}

// AvgDown3D: the front of time zero-padded to a multiple of ft, then each group of
// c * ft * fs * fs / out channels of the space-to-depth rearrangement averaged: channel
// ((ch * ft + a) * fs + p) * fs + q holds x[ch, t * ft + a, i * fs + p, j * fs + q].
Video avg_down(const Video& x, int64_t out_c, int64_t ft, int64_t fs, ThreadPool& pool) {
  const int64_t pad = (ft - x.t % ft) % ft, factor = ft * fs * fs, g = x.c * factor / out_c;
  Video y;
  y.reshape(out_c, (x.t + pad) / ft, x.h / fs, x.w / fs);
  std::fill(y.d.begin(), y.d.end(), 0.0f);
  const float group = static_cast<float>(g);  // x.mean(dim=2): the sum over the group / g
  pool.parallel_for(out_c, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      for (int64_t k = 0; k < g; ++k) {
        const int64_t idx = o * g + k, ch = idx / factor, a = idx / (fs * fs) % ft;
        const int64_t p = idx / fs % fs, q = idx % fs;
        for (int64_t t = 0; t < y.t; ++t) {
          const int64_t src_t = t * ft + a - pad;
          if (src_t < 0) continue;
          const float* src = x.d.data() + (ch * x.t + src_t) * x.hw();
          float* dst = y.d.data() + (o * y.t + t) * y.hw();
          for (int64_t i = 0; i < y.h; ++i) {
            for (int64_t j = 0; j < y.w; ++j)
              dst[i * y.w + j] += src[(i * fs + p) * x.w + j * fs + q];
          }
        }
      }
      float* yo = y.d.data() + o * y.t * y.hw();
      for (int64_t i = 0; i < y.t * y.hw(); ++i) yo[i] /= group;
    }
  });
  return y;
}

// x += DupUp3D(in): output channel co, frame t * ft + a, pixel (i * fs + p, j * fs + q) reads
// input channel (((co * ft + a) * fs + p) * fs + q) / repeats at (t, i, j); the first chunk
// drops the first ft - 1 frames.
Status add_dup_up(const Video& in, const WanLevel& lv, bool first_chunk, Video* x,
                  ThreadPool& pool) {
  const int64_t ft = lv.factor_t, fs = lv.factor_s, out_c = lv.shortcut_out;
  const int64_t repeats = out_c * ft * fs * fs / in.c, drop = first_chunk ? ft - 1 : 0;
  if (x->c != out_c || x->t != in.t * ft - drop || x->h != in.h * fs || x->w != in.w * fs) {
    return internal_error("wan vae: DupUp3D shortcut shape does not match its level's output");
  }
  pool.parallel_for(out_c, [&](int64_t c0, int64_t c1) {
    for (int64_t co = c0; co < c1; ++co) {
      for (int64_t a = 0; a < ft; ++a) {
        for (int64_t p = 0; p < fs; ++p) {
          for (int64_t q = 0; q < fs; ++q) {
            const int64_t ci = (((co * ft + a) * fs + p) * fs + q) / repeats;
            for (int64_t t = 0; t < in.t; ++t) {
              const int64_t ot = t * ft + a - drop;
              if (ot < 0) continue;
              const float* src = in.d.data() + (ci * in.t + t) * in.hw();
              float* dst = x->d.data() + (co * x->t + ot) * x->hw();
              for (int64_t i = 0; i < in.h; ++i) {
                for (int64_t j = 0; j < in.w; ++j) {
                  dst[(i * fs + p) * x->w + j * fs + q] += src[i * in.w + j];
                }
              }
            }
          }
        }
      }
    }
  });
  return ok_status();
}

Status encoder_level(const WanLevel& lv, Video* x, Caches& caches, ThreadPool& pool) {
  Video shortcut;
  if (lv.shortcut) shortcut = avg_down(*x, lv.shortcut_out, lv.factor_t, lv.factor_s, pool);
  for (const WanResBlock& r : lv.resnets) QS_RETURN_IF_ERROR(res_block(r, x, caches, pool));
  QS_RETURN_IF_ERROR(resample(lv.resample, x, caches, pool));
  if (lv.shortcut) {
    if (shortcut.numel() != x->numel() || shortcut.t != x->t) {
      return internal_error("wan vae: AvgDown3D shortcut shape does not match its level's output");
    }
    add_into(x->d.data(), shortcut.d.data(), x->numel(), pool);
  }
  return ok_status();
}

Status decoder_level(const WanLevel& lv, Video* x, Caches& caches, bool first_chunk,
                     ThreadPool& pool) {
  Video in;
  if (lv.shortcut) in = *x;
  for (const WanResBlock& r : lv.resnets) QS_RETURN_IF_ERROR(res_block(r, x, caches, pool));
  QS_RETURN_IF_ERROR(resample(lv.resample, x, caches, pool));
  if (lv.shortcut) QS_RETURN_IF_ERROR(add_dup_up(in, lv, first_chunk, x, pool));
  return ok_status();
}

// WanDecoder3d.forward on one latent frame (x: after post_quant_conv).
Status decode_chunk(const WanCoder& d, Video* x, Caches& caches, bool first_chunk,
                    ThreadPool& pool) {
  Video y;
  QS_RETURN_IF_ERROR(causal_conv(d.conv_in, *x, nullptr, caches, &y, pool));
  QS_RETURN_IF_ERROR(mid_block(d.mid, &y, caches, pool));
  for (const WanLevel& lv : d.levels) {
    QS_RETURN_IF_ERROR(decoder_level(lv, &y, caches, first_chunk, pool));
  }
  return causal_conv(d.conv_out, y, &d.gamma_out, caches, x, pool);
}

// WanEncoder3d.forward on one chunk of (patchified) frames.
Status encode_chunk(const WanCoder& e, Video* x, Caches& caches, ThreadPool& pool) {
  Video y;
  QS_RETURN_IF_ERROR(causal_conv(e.conv_in, *x, nullptr, caches, &y, pool));
  for (const WanLevel& lv : e.levels) QS_RETURN_IF_ERROR(encoder_level(lv, &y, caches, pool));
  QS_RETURN_IF_ERROR(mid_block(e.mid, &y, caches, pool));
  return causal_conv(e.conv_out, y, &e.gamma_out, caches, x, pool);
}

// WanDecoder3d's widths: dims = base * [dim_mult[-1]] + base * dim_mult[::-1]; Wan2.1's
// levels after the first take half their predecessor's width (its upsample conv halves it,
// upsample_out_dim = dim // 2), Wan2.2's keep it and add a DupUp3D shortcut.
}  // namespace wan_vae
}  // namespace

Result<AutoencoderKLWan> AutoencoderKLWan::load(const std::string& dir) {
  using namespace wan_vae;
  AutoencoderKLWan vae;
  QS_ASSIGN_OR_RETURN(models::Component c, models::Component::open(dir));
  QS_ASSIGN_OR_RETURN(vae.config_, read_wan_vae_config(c));
  const WanVaeConfig& v = vae.config_;
  const int64_t levels = static_cast<int64_t>(v.dim_mult.size()), z = v.z_dim;
  const bool res = v.is_residual;
  int unused = 0;
  Loader top{c, &unused};
  QS_ASSIGN_OR_RETURN(vae.post_quant_conv_, top.causal("post_quant_conv", z, z, 1));

  WanCoder& d = vae.decoder_;
  Loader dl{c, &d.n_caches};
  const std::vector<WanVaeUpLevel> dims = wan_vae_decoder_levels(v);
  QS_ASSIGN_OR_RETURN(d.conv_in, dl.causal("decoder.conv_in", z, dims[0].in, 3));
  QS_ASSIGN_OR_RETURN(d.mid, dl.mid("decoder.mid_block", dims[0].in));
  for (int64_t i = 0; i < levels; ++i) {
    const std::string p = "decoder.up_blocks." + std::to_string(i);
    const WanVaeUpLevel& l = dims[i];
    WanLevel lv;
    for (int64_t r = 0; r <= v.num_res_blocks; ++r) {
      QS_ASSIGN_OR_RETURN(WanResBlock rb, dl.res(p + ".resnets." + std::to_string(r),
                                                 r == 0 ? l.in : l.out, l.out));
      lv.resnets.push_back(std::move(rb));
    }
    if (l.mode == WanResampleMode::kNone) {
      d.levels.push_back(std::move(lv));
      continue;
    }
    QS_ASSIGN_OR_RETURN(lv.resample, dl.resample(p + (res ? ".upsampler" : ".upsamplers.0"), l.mode,
                                                 l.out, l.resample_out));
    if (res) {
      lv.shortcut = true;
      lv.shortcut_in = l.in, lv.shortcut_out = l.out, lv.factor_t = l.factor_t, lv.factor_s = 2;
      if (l.out * l.factor_t * 4 % l.in != 0) {
        return invalid_argument(dir + ": DupUp3D of up block " + std::to_string(i) + ": " +
                                std::to_string(l.out) + " channels times " +
                                std::to_string(l.factor_t * 4) + " not divisible by " +
                                std::to_string(l.in));
      }
    }
    d.levels.push_back(std::move(lv));
  }
  const int64_t last = dims.back().out;
  QS_ASSIGN_OR_RETURN(d.gamma_out, dl.gamma("decoder.norm_out", last, false));
  QS_ASSIGN_OR_RETURN(d.conv_out, dl.causal("decoder.conv_out", last, v.out_channels, 3));

  vae.has_encoder_ = c.has("encoder.conv_in.weight");
  if (!vae.has_encoder_) return vae;
  // Encoder: dims = base * [1] + base * dim_mult. Wan2.1 lists its blocks flat
  // (down_blocks.k: res blocks and resamples in order), Wan2.2 nests them per level.
  WanCoder& e = vae.encoder_;
  Loader el{c, &e.n_caches};
  std::vector<int64_t> ed = {v.base_dim};
  for (int64_t m : v.dim_mult) ed.push_back(v.base_dim * m);
  QS_ASSIGN_OR_RETURN(e.conv_in, el.causal("encoder.conv_in", v.in_channels, ed[0], 3));
  int64_t flat = 0;
  for (int64_t i = 0; i < levels; ++i) {
    const int64_t in = ed[i], out = ed[i + 1];
    const bool down = i != levels - 1, time_down = down && v.temperal_downsample[i];
    const std::string p = "encoder.down_blocks." + std::to_string(i);
    WanLevel lv;
    for (int64_t r = 0; r < v.num_res_blocks; ++r) {
      const std::string name = res ? p + ".resnets." + std::to_string(r)
                                   : "encoder.down_blocks." + std::to_string(flat++);
      QS_ASSIGN_OR_RETURN(WanResBlock rb, el.res(name, r == 0 ? in : out, out));
      lv.resnets.push_back(std::move(rb));
    }
    if (down) {
      const auto mode = time_down ? WanResampleMode::kDown3d : WanResampleMode::kDown2d;
      const std::string name =
          res ? p + ".downsampler" : "encoder.down_blocks." + std::to_string(flat++);
      QS_ASSIGN_OR_RETURN(lv.resample, el.resample(name, mode, out, out));
    }
    if (res) {
      lv.shortcut = true;
      lv.shortcut_in = in, lv.shortcut_out = out;
      lv.factor_t = time_down ? 2 : 1, lv.factor_s = down ? 2 : 1;
      if (in * lv.factor_t * lv.factor_s * lv.factor_s % out != 0) {
        return invalid_argument(dir + ": AvgDown3D of down block " + std::to_string(i) + ": " +
                                std::to_string(in) + " channels times " +
                                std::to_string(lv.factor_t * lv.factor_s * lv.factor_s) +
                                " not divisible by " + std::to_string(out));
      }
    }
    e.levels.push_back(std::move(lv));
  }
  QS_ASSIGN_OR_RETURN(e.mid, el.mid("encoder.mid_block", ed[levels]));
  QS_ASSIGN_OR_RETURN(e.gamma_out, el.gamma("encoder.norm_out", ed[levels], false));
  QS_ASSIGN_OR_RETURN(e.conv_out, el.causal("encoder.conv_out", ed[levels], 2 * z, 3));
  // quant_conv [2z, 2z, 1, 1, 1]: the mode is the mean, the first z output channels.
  QS_ASSIGN_OR_RETURN(vae.quant_conv_, top.causal("quant_conv", 2 * z, 2 * z, 1));
  vae.quant_conv_.c_out = z;
  vae.quant_conv_.w.resize(static_cast<size_t>(z * 2 * z));
  vae.quant_conv_.b.resize(static_cast<size_t>(z));
  return vae;
}

Result<std::vector<float>> AutoencoderKLWan::decode(const float* z, int64_t channels, int64_t t,
                                                    int64_t h, int64_t w, ThreadPool& pool) const {
  using namespace wan_vae;
  const WanVaeConfig& v = config_;
  if (channels != v.z_dim) {
    return invalid_argument("wan vae decode: the latents have " + std::to_string(channels) +
                            " channels, the VAE's z_dim is " + std::to_string(v.z_dim));
  }
  if (t <= 0 || h <= 0 || w <= 0 || t > kMaxSide || h > kMaxSide || w > kMaxSide) {
    return invalid_argument("wan vae decode: latent size [" + std::to_string(t) + ", " +
                            std::to_string(h) + ", " + std::to_string(w) +
                            "] must be positive and at most " + std::to_string(kMaxSide));
  }
  const int64_t s = spatial_scale(), p = v.patch_size, vc = v.video_channels();
  const int64_t frames = 1 + temporal_scale() * (t - 1);
  QS_ASSIGN_OR_RETURN(const int64_t n_out,
                      limits::checked_numel({vc, frames, h * s, w * s}, "wan vae decode output"));
  std::vector<float> out(static_cast<size_t>(n_out));
  const int64_t H = h * s, W = w * s, hw = h * w;
  Caches caches(static_cast<size_t>(decoder_.n_caches));
  int64_t f0 = 0;
  for (int64_t i = 0; i < t; ++i) {
    // Fresh buffers per latent frame: the last chunk's output is not kept through the next.
    Video lat, x;
    lat.reshape(v.z_dim, 1, h, w);
    for (int64_t c = 0; c < v.z_dim; ++c)
      std::copy_n(z + (c * t + i) * hw, hw, lat.d.data() + c * hw);
    QS_RETURN_IF_ERROR(causal_conv(post_quant_conv_, lat, nullptr, caches, &x, pool));
    QS_RETURN_IF_ERROR(decode_chunk(decoder_, &x, caches, i == 0, pool));
    QS_CHECK(x.c == vc * p * p && x.h * p == H && x.w * p == W && f0 + x.t <= frames);
    // unpatchify: video channel c, pixel (i * p + b, j * p + a) is channel (c * p + a) * p + b;
    // then torch.clamp(-1, 1).
    pool.parallel_for(vc * x.t, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t c = j / x.t, f = j % x.t;
        float* dst = out.data() + (c * frames + f0 + f) * H * W;
        for (int64_t a = 0; a < p; ++a) {
          for (int64_t b = 0; b < p; ++b) {
            const float* src = x.d.data() + (((c * p + a) * p + b) * x.t + f) * x.hw();
            for (int64_t r = 0; r < x.h; ++r) {
              for (int64_t q = 0; q < x.w; ++q) {
                dst[(r * p + b) * W + q * p + a] = std::clamp(src[r * x.w + q], -1.0f, 1.0f);
              }
            }
          }
        }
      }
    });
    f0 += x.t;
  }
  QS_CHECK(f0 == frames);
  return out;
}

Result<std::vector<float>> AutoencoderKLWan::encode_mean(const float* x, int64_t f, int64_t height,
                                                         int64_t width, ThreadPool& pool) const {
  using namespace wan_vae;
  const WanVaeConfig& v = config_;
  if (!has_encoder_) return unimplemented("wan vae: this checkpoint has no encoder");
  const int64_t s = spatial_scale(), p = v.patch_size, vc = v.video_channels();
  if (f <= 0 || f > kMaxSide || (f - 1) % kEncodeChunk != 0) {
    return invalid_argument("wan vae encode: " + std::to_string(f) +
                            " frames; the VAE encodes 1 + 4k frames, at most " +
                            std::to_string(kMaxSide));
  }
  if (height <= 0 || width <= 0 || height % s != 0 || width % s != 0 || height > kMaxSide * s ||
      width > kMaxSide * s) {
    return invalid_argument("wan vae encode: frame size " + std::to_string(height) + "x" +
                            std::to_string(width) + " must be positive multiples of " +
                            std::to_string(s) + ", at most " + std::to_string(kMaxSide * s));
  }
  const int64_t t = 1 + (f - 1) / kEncodeChunk, h = height / s, w = width / s;
  QS_RETURN_IF_ERROR(
      limits::checked_numel({vc, f, height, width}, "wan vae encode input").status());
  std::vector<float> mean(static_cast<size_t>(v.z_dim * t * h * w));
  Caches caches(static_cast<size_t>(encoder_.n_caches));
  const int64_t Hp = height / p, Wp = width / p;
  for (int64_t i = 0; i < t; ++i) {
    Video chunk, m;
    const int64_t f0 = i == 0 ? 0 : 1 + kEncodeChunk * (i - 1), nf = i == 0 ? 1 : kEncodeChunk;
    // patchify: channel (c * p + q) * p + r, pixel (a, b) is video channel c at
    // (a * p + r, b * p + q).
    chunk.reshape(vc * p * p, nf, Hp, Wp);
    pool.parallel_for(vc * nf, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t c = j / nf, k = j % nf;
        const float* src = x + (c * f + f0 + k) * height * width;
        for (int64_t q = 0; q < p; ++q) {
          for (int64_t r = 0; r < p; ++r) {
            float* dst = chunk.d.data() + (((c * p + q) * p + r) * nf + k) * Hp * Wp;
            for (int64_t a = 0; a < Hp; ++a) {
              for (int64_t b = 0; b < Wp; ++b)
                dst[a * Wp + b] = src[(a * p + r) * width + b * p + q];
            }
          }
        }
      }
    });
    QS_RETURN_IF_ERROR(encode_chunk(encoder_, &chunk, caches, pool));
    QS_RETURN_IF_ERROR(causal_conv(quant_conv_, chunk, nullptr, caches, &m, pool));
    QS_CHECK(m.c == v.z_dim && m.t == 1 && m.h == h && m.w == w);
    for (int64_t c = 0; c < v.z_dim; ++c) {
      std::copy_n(m.d.data() + c * h * w, h * w, mean.data() + (c * t + i) * h * w);
    }
  }
  return mean;
}

// decode()'s memory, walked on shapes alone (config, no weights) in the order decode() runs,
// for a latent frame after the first (the first has one frame at every level and is smaller).
// In floats:
//  - the output video [video_channels, 1 + 4 (t - 1), h s, w s]: the only term that grows
//    with t;
//  - every frame cache once all exist: two frames of each causal 3x3x3 convolution's input
//    (and of upsample3d's time convolution) at its level's size;
//  - the largest set of buffers one step holds at once, on top of a Wan2.2 level's input kept
//    for its DupUp3D shortcut: a causal conv holds its input, the input joined to its cached
//    frames (2 more) and its output; a res block its input besides; upsample3d its input, the
//    time conv's output and the interleaved frames; the 2-D upsample the nearest-2x frames and
//    the conv's output; the attention its q, k, v, output, K^T and score blocks per thread;
//  - per thread, the largest column buffer of a convolution and the largest GEMM packing
//    (ops::gemm keeps it between calls; conv3d_scratch).
}  // namespace qs::diffusion
