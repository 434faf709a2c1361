// audio: Qwen2.5-Omni's audio tower (see qwen2_5_omni_audio.h), as transformers'
// modeling_qwen2_5_omni.py computes it.
#include "audio/qwen2_5_omni_audio.h"

#include <algorithm>
#include <cmath>

#include "ops/activation.h"
#include "ops/conv.h"

namespace qs::audio {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // nn.LayerNorm's default

Result<int64_t> audio_field(const nlohmann::json& j, const char* key, int64_t fallback, int64_t lo,
                            int64_t hi) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < lo || j[key].get<int64_t>() > hi) {
    return invalid_argument(std::string("audio_config field '") + key + "' must be " +
                            std::to_string(lo) + " to " + std::to_string(hi));
  }
  return j[key].get<int64_t>();
}

Status norm_pair(const models::Component& c, const std::string& p, int64_t d, std::vector<float>* w,
                 std::vector<float>* b) {
  QS_ASSIGN_OR_RETURN(*w, c.f32(p + ".weight", {d}));
  QS_ASSIGN_OR_RETURN(*b, c.f32(p + ".bias", {d}));
  return ok_status();
}

}  // namespace

Result<Qwen25OmniAudioTower> Qwen25OmniAudioTower::load(const std::string& dir) {
  Qwen25OmniAudioTower t;
  QS_ASSIGN_OR_RETURN(t.weights_, models::Component::open(dir));
  const models::Component& c = t.weights_;
  if (!c.config().contains("audio_config") || !c.config()["audio_config"].is_object()) {
    return invalid_argument(dir + "/config.json: no audio_config (the model has no audio tower)");
  }
  const nlohmann::json& a = c.config()["audio_config"];
  OmniAudioConfig& f = t.config_;
  QS_ASSIGN_OR_RETURN(f.num_mel_bins, audio_field(a, "num_mel_bins", f.num_mel_bins, 1, 512));
  QS_ASSIGN_OR_RETURN(f.d_model, audio_field(a, "d_model", f.d_model, 2, 16384));
  QS_ASSIGN_OR_RETURN(f.encoder_layers, audio_field(a, "encoder_layers", f.encoder_layers, 0, 256));
  QS_ASSIGN_OR_RETURN(f.encoder_attention_heads,
                      audio_field(a, "encoder_attention_heads", f.encoder_attention_heads, 1, 256));
  QS_ASSIGN_OR_RETURN(f.encoder_ffn_dim,
                      audio_field(a, "encoder_ffn_dim", f.encoder_ffn_dim, 1, 1 << 17));
  QS_ASSIGN_OR_RETURN(f.n_window, audio_field(a, "n_window", f.n_window, 1, 1 << 16));
  QS_ASSIGN_OR_RETURN(f.output_dim, audio_field(a, "output_dim", f.output_dim, 1, 65536));
  QS_ASSIGN_OR_RETURN(f.max_source_positions,
                      audio_field(a, "max_source_positions", f.max_source_positions, 1, 1 << 16));
  if (f.d_model % f.encoder_attention_heads != 0 || f.d_model % 2 != 0) {
    return invalid_argument("audio_config: d_model must be even and a multiple of the heads");
  }
  if (a.contains("activation_function") && a["activation_function"] != "gelu") {
    return unimplemented("audio_config activation_function " + a["activation_function"].dump());
  }
  if (a.contains("scale_embedding") && a["scale_embedding"] == true) {
    return unimplemented("audio_config scale_embedding true");
  }
  const int64_t d = f.d_model;
  const std::string p = "audio_tower.";
  QS_ASSIGN_OR_RETURN(t.conv1_w_, c.f32(p + "conv1.weight", {d, f.num_mel_bins, 3}));
  QS_ASSIGN_OR_RETURN(t.conv1_b_, c.f32(p + "conv1.bias", {d}));
  QS_ASSIGN_OR_RETURN(t.conv2_w_, c.f32(p + "conv2.weight", {d, d, 3}));
  QS_ASSIGN_OR_RETURN(t.conv2_b_, c.f32(p + "conv2.bias", {d}));
  for (int64_t i = 0; i < f.encoder_layers; ++i) {
    const std::string lp = p + "layers." + std::to_string(i);
    WhisperLayer l;
    QS_RETURN_IF_ERROR(norm_pair(c, lp + ".self_attn_layer_norm", d, &l.ln_attn_w, &l.ln_attn_b));
    QS_ASSIGN_OR_RETURN(l.attn.q, c.linear(lp + ".self_attn.q_proj", d, d, &l.attn.bq));
    QS_ASSIGN_OR_RETURN(l.attn.k, c.linear(lp + ".self_attn.k_proj", d, d, nullptr));
    QS_ASSIGN_OR_RETURN(l.attn.v, c.linear(lp + ".self_attn.v_proj", d, d, &l.attn.bv));
    QS_ASSIGN_OR_RETURN(l.attn.o, c.linear(lp + ".self_attn.out_proj", d, d, &l.attn.bo));
    QS_RETURN_IF_ERROR(norm_pair(c, lp + ".final_layer_norm", d, &l.ln_ffn_w, &l.ln_ffn_b));
    QS_ASSIGN_OR_RETURN(l.fc1, c.linear(lp + ".fc1", f.encoder_ffn_dim, d, &l.b1));
    QS_ASSIGN_OR_RETURN(l.fc2, c.linear(lp + ".fc2", d, f.encoder_ffn_dim, &l.b2));
    t.layers_.push_back(std::move(l));
  }
  QS_RETURN_IF_ERROR(norm_pair(c, p + "ln_post", d, &t.ln_post_w_, &t.ln_post_b_));
  QS_ASSIGN_OR_RETURN(t.proj_, c.linear(p + "proj", f.output_dim, d, &t.proj_b_));
  // SinusoidsPositionEmbedding: not stored, computed as transformers does (f32 timescales).
  const int64_t half = d / 2, n = f.max_source_positions;
  t.positions_.resize(static_cast<size_t>(n * d));
  const double step = std::log(10000.0) / static_cast<double>(half - 1);
  for (int64_t j = 0; j < half; ++j) {
    const float inv = std::exp(static_cast<float>(-step) * static_cast<float>(j));
    for (int64_t pos = 0; pos < n; ++pos) {
      const float angle = static_cast<float>(pos) * inv;
      t.positions_[pos * d + j] = std::sin(angle);
      t.positions_[pos * d + half + j] = std::cos(angle);
    }
  }
  return t;
}

Status Qwen25OmniAudioTower::encode(const float* features, int64_t frames, std::vector<float>* out,
                                    ThreadPool& pool) const {
  const OmniAudioConfig& f = config_;
  const int64_t d = f.d_model, mels = f.num_mel_bins, chunk = 2 * f.n_window;
  const int64_t heads = f.encoder_attention_heads;
  if (frames < 3 || frames > (int64_t{1} << 24)) {
    return invalid_argument("audio tower: " + std::to_string(frames) + " frames (3 or more)");
  }
  // Each chunk alone: zero padding around it is what transformers' padded batch amounts to.
  std::vector<float> x;  // [rows, d], every chunk's rows back to back
  std::vector<int64_t> bounds = {0};
  std::vector<float> in, c1, c2;
  for (int64_t start = 0; start < frames; start += chunk) {
    const int64_t len = std::min(chunk, frames - start);
    in.resize(static_cast<size_t>(mels * len));
    for (int64_t m = 0; m < mels; ++m) {
      std::copy_n(features + m * frames + start, len, in.data() + m * len);
    }
    const ops::Conv2dShape s1{1, mels, 1, len, d, 1, 3, 1, 0, 0, 1, 1};
    c1.resize(static_cast<size_t>(d * len));
    QS_RETURN_IF_ERROR(
        ops::conv2d(in.data(), s1, conv1_w_.data(), conv1_b_.data(), c1.data(), pool));
    ops::gelu_erf(c1.data(), d * len);
    const ops::Conv2dShape s2{1, d, 1, len, d, 1, 3, 2, 0, 0, 1, 1};
    const int64_t rows = s2.out_w();
    if (rows > f.max_source_positions) {
      return invalid_argument("audio tower: n_window beyond max_source_positions");
    }
    c2.resize(static_cast<size_t>(d * rows));
    QS_RETURN_IF_ERROR(
        ops::conv2d(c1.data(), s2, conv2_w_.data(), conv2_b_.data(), c2.data(), pool));
    ops::gelu_erf(c2.data(), d * rows);
    const size_t base = x.size();
    x.resize(base + static_cast<size_t>(rows * d));
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t j = 0; j < d; ++j)
        x[base + t * d + j] = c2[j * rows + t] + positions_[t * d + j];
    }
    bounds.push_back(bounds.back() + rows);
  }
  const int64_t n = bounds.back();
  QS_RETURN_IF_ERROR(
      run_encoder_layers(layers_, heads, kLayerNormEps, bounds, x.data(), n, {}, pool));
  // Pairs of rows averaged over the clip's rows (a trailing odd row dropped), normed, projected.
  const int64_t pooled = tokens(frames);
  std::vector<float> p(static_cast<size_t>(pooled * d));
  for (int64_t t = 0; t < pooled; ++t) {
    for (int64_t j = 0; j < d; ++j) {
      p[t * d + j] = (x[(2 * t) * d + j] + x[(2 * t + 1) * d + j]) / 2.0f;
    }
  }
  ops::layer_norm(p.data(), pooled, d, ln_post_w_.data(), ln_post_b_.data(), kLayerNormEps,
                  p.data());
  out->resize(static_cast<size_t>(pooled * f.output_dim));
  return ops::linear(p.data(), pooled, proj_, proj_b_.data(), out->data(), pool);
}

}  // namespace qs::audio
