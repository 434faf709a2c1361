// diffusion: AutoencoderKLWan's configuration side (see autoencoder_kl_wan.h): vae/config.json
// read and checked, the pipeline's latent (de-)normalisation, the decoder's level widths (which
// the loader, the memory estimate and inspect's tensor list all follow) and the decode's peak
// memory. The forward is autoencoder_kl_wan.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "diffusion/autoencoder_kl_wan.h"
#include "ops/conv3d.h"

namespace qs::diffusion {

namespace {
// Named: the room compiles in unity batches, where other files' helpers share the anonymous
// namespace.
namespace wan_vae_config {

Result<std::vector<double>> float_list(const models::Component& c, const std::string& key,
                                       int64_t n) {
  const std::string where = c.dir() + "/config.json: '" + key + "'";
  if (!c.config().contains(key)) return invalid_argument(where + " is missing");
  const auto& v = c.config()[key];
  std::vector<double> out;
  if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number()) break;
      out.push_back(e.get<double>());
    }
  }
  if (!v.is_array() || out.size() != v.size() || static_cast<int64_t>(out.size()) != n) {
    return invalid_argument(where + " must list " + std::to_string(n) + " numbers (z_dim)");
  }
  return out;
}

}  // namespace wan_vae_config
}  // namespace

std::vector<WanVaeUpLevel> wan_vae_decoder_levels(const WanVaeConfig& v) {
  const int64_t levels = static_cast<int64_t>(v.dim_mult.size());
  std::vector<int64_t> dd = {v.decoder_base_dim * v.dim_mult.back()};
  for (int64_t i = levels - 1; i >= 0; --i) dd.push_back(v.decoder_base_dim * v.dim_mult[i]);
  std::vector<WanVaeUpLevel> out;
  for (int64_t i = 0; i < levels; ++i) {
    WanVaeUpLevel l;
    l.in = (i > 0 && !v.is_residual) ? dd[i] / 2 : dd[i];
    l.out = dd[i + 1];
    if (i != levels - 1) {
      const bool time_up = v.temperal_downsample[levels - 2 - i];  // temperal_upsample[i]
      l.mode = time_up ? WanResampleMode::kUp3d : WanResampleMode::kUp2d;
      l.resample_out = v.is_residual ? l.out : l.out / 2;
      l.factor_t = time_up ? 2 : 1;
    }
    out.push_back(l);
  }
  return out;
}

Result<WanVaeConfig> read_wan_vae_config(const models::Component& c) {
  WanVaeConfig v;
  const std::string where = c.dir() + "/config.json: ";
  QS_ASSIGN_OR_RETURN(v.base_dim, c.int_field("base_dim", 96));
  QS_ASSIGN_OR_RETURN(v.decoder_base_dim, c.int_field("decoder_base_dim", v.base_dim));
  QS_ASSIGN_OR_RETURN(v.z_dim, c.int_field("z_dim", 16));
  QS_ASSIGN_OR_RETURN(v.dim_mult, c.int_list_field("dim_mult", {1, 2, 4, 4}));
  QS_ASSIGN_OR_RETURN(v.num_res_blocks, c.int_field("num_res_blocks", 2));
  QS_ASSIGN_OR_RETURN(v.is_residual, c.bool_field("is_residual", false));
  QS_ASSIGN_OR_RETURN(v.in_channels, c.int_field("in_channels", 3));
  QS_ASSIGN_OR_RETURN(v.out_channels, c.int_field("out_channels", 3));
  QS_ASSIGN_OR_RETURN(v.patch_size, c.int_field("patch_size", 1));
  QS_ASSIGN_OR_RETURN(v.scale_factor_temporal, c.int_field("scale_factor_temporal", 4));
  QS_ASSIGN_OR_RETURN(v.scale_factor_spatial, c.int_field("scale_factor_spatial", 8));
  const int64_t levels = static_cast<int64_t>(v.dim_mult.size());
  if (levels < 1 || levels > 8) return invalid_argument(where + "dim_mult must list 1 to 8 levels");
  for (int64_t m : v.dim_mult) {
    if (m <= 0 || m > 64) return invalid_argument(where + "dim_mult entries must be in [1, 64]");
  }
  auto in_range = [](int64_t x, int64_t hi) { return x > 0 && x <= hi; };
  if (!in_range(v.base_dim, 4096) || !in_range(v.decoder_base_dim, 4096) ||
      !in_range(v.z_dim, 4096) || !in_range(v.num_res_blocks, 64) ||
      !in_range(v.in_channels, 4096) || !in_range(v.out_channels, 4096) ||
      !in_range(v.patch_size, 16)) {
    return invalid_argument(where +
                            "base_dim, decoder_base_dim, z_dim, num_res_blocks, in_channels, "
                            "out_channels or patch_size is out of range");
  }
  if (c.config().contains("attn_scales") && !c.config()["attn_scales"].is_null() &&
      !c.config()["attn_scales"].empty()) {
    return unimplemented(where + "attn_scales " + c.config()["attn_scales"].dump() +
                         " (attention inside the encoder's levels; only [] is implemented)");
  }
  if (c.config().contains("temperal_downsample")) {
    const auto& td = c.config()["temperal_downsample"];
    v.temperal_downsample.clear();
    for (const auto& e : td.is_array() ? td : nlohmann::json::array()) {
      if (!e.is_boolean()) {
        return invalid_argument(where + "temperal_downsample must list booleans");
      }
      v.temperal_downsample.push_back(e.get<bool>());
    }
  }
  if (static_cast<int64_t>(v.temperal_downsample.size()) != levels - 1) {
    return invalid_argument(where + "temperal_downsample must have one entry per level but the " +
                            "last (" + std::to_string(levels - 1) + ")");
  }
  const int64_t halvings =
      std::count(v.temperal_downsample.begin(), v.temperal_downsample.end(), true);
  // _encode's chunks are 1 + 4k frames whatever the config says: only two time halvings fit.
  if (halvings != 2 || v.scale_factor_temporal != 4) {
    return unimplemented(where + "temporal compression " + std::to_string(int64_t{1} << halvings) +
                         " (scale_factor_temporal " + std::to_string(v.scale_factor_temporal) +
                         "): diffusers encodes in chunks of 4 frames, only 4 is implemented");
  }
  const int64_t spatial = (int64_t{1} << (levels - 1)) * v.patch_size;
  if (v.scale_factor_spatial != spatial) {
    return invalid_argument(where + "scale_factor_spatial " +
                            std::to_string(v.scale_factor_spatial) + " but the levels and " +
                            "patch_size give " + std::to_string(spatial));
  }
  const int64_t p2 = v.patch_size * v.patch_size;
  if (v.in_channels % p2 != 0 || v.out_channels % p2 != 0 ||
      v.in_channels / p2 != v.out_channels / p2) {
    return unimplemented(where + "in_channels " + std::to_string(v.in_channels) +
                         " and out_channels " + std::to_string(v.out_channels) +
                         " must be the same video channels times patch_size^2");
  }
  QS_ASSIGN_OR_RETURN(v.latents_mean, wan_vae_config::float_list(c, "latents_mean", v.z_dim));
  QS_ASSIGN_OR_RETURN(v.latents_std, wan_vae_config::float_list(c, "latents_std", v.z_dim));
  for (double s : v.latents_std) {
    if (!(s > 0) || !std::isfinite(s)) {
      return invalid_argument(where + "latents_std entries must be positive");
    }
  }
  return v;
}

void wan_denormalize(const WanVaeConfig& cfg, float* z, int64_t t, int64_t h, int64_t w) {
  QS_CHECK(static_cast<int64_t>(cfg.latents_mean.size()) == cfg.z_dim &&
           static_cast<int64_t>(cfg.latents_std.size()) == cfg.z_dim);
  const int64_t n = t * h * w;
  for (int64_t c = 0; c < cfg.z_dim; ++c) {
    const float inv = 1.0f / static_cast<float>(cfg.latents_std[c]);
    const float mean = static_cast<float>(cfg.latents_mean[c]);
    for (int64_t i = 0; i < n; ++i) z[c * n + i] = z[c * n + i] / inv + mean;
  }
}

void wan_normalize(const WanVaeConfig& cfg, float* z, int64_t t, int64_t h, int64_t w) {
  QS_CHECK(static_cast<int64_t>(cfg.latents_mean.size()) == cfg.z_dim &&
           static_cast<int64_t>(cfg.latents_std.size()) == cfg.z_dim);
  const int64_t n = t * h * w;
  for (int64_t c = 0; c < cfg.z_dim; ++c) {
    const float inv = 1.0f / static_cast<float>(cfg.latents_std[c]);
    const float mean = static_cast<float>(cfg.latents_mean[c]);
    for (int64_t i = 0; i < n; ++i) z[c * n + i] = (z[c * n + i] - mean) * inv;
  }
}

size_t wan_vae_decode_peak_bytes(const WanVaeConfig& v, int64_t t, int64_t h, int64_t w,
                                 int threads) {
  t = std::clamp<int64_t>(t, 1, kWanVaeMaxSide), h = std::clamp<int64_t>(h, 1, kWanVaeMaxSide);
  w = std::clamp<int64_t>(w, 1, kWanVaeMaxSide), threads = std::max(threads, 1);
  const std::vector<WanVaeUpLevel> dims = wan_vae_decoder_levels(v);
  const int64_t vc = v.video_channels();
  const int64_t frames = 1 + v.scale_factor_temporal * (t - 1), s = v.scale_factor_spatial;
  int64_t caches = 0, held = 0, step = 0, columns = 0, packing = 0;
  int64_t c = v.z_dim, T = 1, hh = h, ww = w, hw = h * w;
  auto at = [&](int64_t live) { step = std::max(step, held + live); };
  auto conv_scratch = [&](int64_t c_in, int64_t c_out, int64_t kt, int64_t k) {
    ops::Conv3dShape sh{1, c_in, T, hh, ww, c_out, kt, k, k};
    sh.pad_front = kt - 1;
    sh.pad_top = sh.pad_bottom = sh.pad_left = sh.pad_right = k / 2;
    const ops::Conv3dScratch cs = ops::conv3d_scratch(sh, threads);
    columns = std::max(columns, cs.column_floats);
    packing = std::max(packing, cs.packing_floats);
  };
  // A causal 3x3x3 conv from the current c to c_out (normed or not: the joined buffer is made
  // either way once its cache holds frames).
  auto causal = [&](int64_t c_out) {
    caches += kWanVaeCacheFrames * c * hw;
    at(c * T * hw + c * (T + kWanVaeCacheFrames) * hw + c_out * T * hw);
    conv_scratch(c, c_out, 3, 3);
  };
  auto res = [&](int64_t c_out) {
    const int64_t x = c * T * hw;
    caches += kWanVaeCacheFrames * (c + c_out) * hw;
    at(x + c * (T + kWanVaeCacheFrames) * hw + c_out * T * hw);                       // conv1
    at(x + c_out * T * hw + c_out * (T + kWanVaeCacheFrames) * hw + c_out * T * hw);  // conv2
    at(x + 2 * c_out * T * hw);                                                       // shortcut
    conv_scratch(c, c_out, 3, 3);
    conv_scratch(c_out, c_out, 3, 3);
    c = c_out;
  };
  at(2 * v.z_dim * hw);  // the latent frame and post_quant_conv's output
  causal(dims[0].in);
  c = dims[0].in;
  res(c);
  // xn, qkv (3), o, y, K^T, and a 64-query score block per thread; ops::gemm keeps its copy of
  // o^T (the proj GEMM's B) on the calling thread for later calls, counted with the caches, and
  // packs Q K^T's hw-wide B as conv3d packs a band (panels of 256 rows, 32 columns wide).
  at(c * T * hw + 7 * c * hw + threads * 64 * hw);
  caches += c * hw;
  packing = std::max(packing, ((hw + 31) / 32 * 32 + 192) * 256);
  res(c);
  for (const WanVaeUpLevel& l : dims) {
    const int64_t kept = v.is_residual && l.mode != WanResampleMode::kNone ? c * T * hw : 0;
    held += kept;
    for (int64_t r = 0; r <= v.num_res_blocks; ++r) res(l.out);
    if (l.mode == WanResampleMode::kUp3d) {
      caches += kWanVaeCacheFrames * c * hw;
      at(c * T * hw + c * (T + kWanVaeCacheFrames) * hw + 2 * c * T * hw);  // time conv
      at(c * T * hw + 4 * c * T * hw);                                      // + interleaved
      conv_scratch(c, 2 * c, 3, 1);
      T *= 2;
    }
    if (l.mode != WanResampleMode::kNone) {
      at(c * T * hw + 4 * c * T * hw);  // nearest 2x
      hh *= 2, ww *= 2, hw *= 4;
      at(c * T * hw + l.resample_out * T * hw);
      conv_scratch(c, l.resample_out, 1, 3);
      c = l.resample_out;
    }
    held -= kept;
  }
  causal(v.out_channels);  // norm_out + SiLU + conv_out
  const int64_t out = vc * frames * (h * s) * (w * s);
  // ops::gemm grows its packing buffers with vector::resize: up to twice the largest request.
  return static_cast<size_t>(out + caches + step + threads * (columns + 2 * packing)) *
         sizeof(float);
}

}  // namespace qs::diffusion
