// audio: the Whisper encoder-decoder (see whisper_model.h), as transformers'
// modeling_whisper.py computes it.
#include "audio/whisper_model.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "core/dtype.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/dense_attention.h"
#include "ops/elementwise.h"

namespace qs::audio {

Result<WhisperConfig> read_whisper_config(const models::Component& c) {
  WhisperConfig f;
  QS_ASSIGN_OR_RETURN(f.vocab_size, c.int_field("vocab_size", f.vocab_size));
  QS_ASSIGN_OR_RETURN(f.num_mel_bins, c.int_field("num_mel_bins", f.num_mel_bins));
  QS_ASSIGN_OR_RETURN(f.d_model, c.int_field("d_model", f.d_model));
  QS_ASSIGN_OR_RETURN(f.encoder_layers, c.int_field("encoder_layers", f.encoder_layers));
  QS_ASSIGN_OR_RETURN(f.encoder_attention_heads,
                      c.int_field("encoder_attention_heads", f.encoder_attention_heads));
  QS_ASSIGN_OR_RETURN(f.encoder_ffn_dim, c.int_field("encoder_ffn_dim", f.encoder_ffn_dim));
  QS_ASSIGN_OR_RETURN(f.decoder_layers, c.int_field("decoder_layers", f.decoder_layers));
  QS_ASSIGN_OR_RETURN(f.decoder_attention_heads,
                      c.int_field("decoder_attention_heads", f.decoder_attention_heads));
  QS_ASSIGN_OR_RETURN(f.decoder_ffn_dim, c.int_field("decoder_ffn_dim", f.decoder_ffn_dim));
  QS_ASSIGN_OR_RETURN(f.max_source_positions,
                      c.int_field("max_source_positions", f.max_source_positions));
  QS_ASSIGN_OR_RETURN(f.max_target_positions,
                      c.int_field("max_target_positions", f.max_target_positions));
  QS_ASSIGN_OR_RETURN(f.scale_embedding, c.bool_field("scale_embedding", false));
  QS_ASSIGN_OR_RETURN(std::string act, c.string_field("activation_function", "gelu"));
  const std::string where = c.dir() + "/config.json: ";
  if (act != "gelu") return unimplemented(where + "activation_function \"" + act + "\"");
  auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  if (!in(f.vocab_size, 1, int64_t{1} << 20) || !in(f.num_mel_bins, 1, 512) ||
      !in(f.d_model, 1, 16384) || !in(f.encoder_layers, 0, 256) || !in(f.decoder_layers, 1, 256) ||
      !in(f.encoder_attention_heads, 1, 256) || !in(f.decoder_attention_heads, 1, 256) ||
      !in(f.encoder_ffn_dim, 1, 1 << 17) || !in(f.decoder_ffn_dim, 1, 1 << 17) ||
      !in(f.max_source_positions, 1, 1 << 16) || !in(f.max_target_positions, 1, 1 << 16)) {
    return invalid_argument(where + "a size is out of range");
  }
  if (f.d_model % f.encoder_attention_heads != 0 || f.d_model % f.decoder_attention_heads != 0) {
    return invalid_argument(where + "d_model is not a multiple of the attention heads");
  }
  return f;
}

namespace {

// The decoder's caches (self and cross) are each one block of the paged attention kernel.
constexpr int32_t kOneBlockIds[] = {0};
constexpr std::span<const int32_t> kOneBlock(kOneBlockIds);

Result<WhisperAttention> load_attention(const models::Component& c, const std::string& p,
                                        int64_t d) {
  WhisperAttention a;
  QS_ASSIGN_OR_RETURN(a.q, c.linear(p + ".q_proj", d, d, &a.bq));
  QS_ASSIGN_OR_RETURN(a.k, c.linear(p + ".k_proj", d, d, nullptr));
  QS_ASSIGN_OR_RETURN(a.v, c.linear(p + ".v_proj", d, d, &a.bv));
  QS_ASSIGN_OR_RETURN(a.o, c.linear(p + ".out_proj", d, d, &a.bo));
  return a;
}

Status load_norm(const models::Component& c, const std::string& p, int64_t d, std::vector<float>* w,
                 std::vector<float>* b) {
  QS_ASSIGN_OR_RETURN(*w, c.f32(p + ".weight", {d}));
  QS_ASSIGN_OR_RETURN(*b, c.f32(p + ".bias", {d}));
  return ok_status();
}

Result<WhisperLayer> load_layer(const models::Component& c, const std::string& p, int64_t d,
                                int64_t ff, bool decoder) {
  WhisperLayer l;
  l.prefix = p;
  QS_RETURN_IF_ERROR(load_norm(c, p + ".self_attn_layer_norm", d, &l.ln_attn_w, &l.ln_attn_b));
  QS_ASSIGN_OR_RETURN(l.attn, load_attention(c, p + ".self_attn", d));
  if (decoder) {
    QS_RETURN_IF_ERROR(
        load_norm(c, p + ".encoder_attn_layer_norm", d, &l.ln_cross_w, &l.ln_cross_b));
    QS_ASSIGN_OR_RETURN(l.cross, load_attention(c, p + ".encoder_attn", d));
  }
  QS_RETURN_IF_ERROR(load_norm(c, p + ".final_layer_norm", d, &l.ln_ffn_w, &l.ln_ffn_b));
  QS_ASSIGN_OR_RETURN(l.fc1, c.linear(p + ".fc1", ff, d, &l.b1));
  QS_ASSIGN_OR_RETURN(l.fc2, c.linear(p + ".fc2", d, ff, &l.b2));
  return l;
}

// The observer hears `names` (of layer l's linears), each reading the rows x [m, k]. The name is
// built only when someone listens.
void observe(const LinearObserver& o, const WhisperLayer& l,
             std::initializer_list<const char*> names, const float* x, int64_t m, int64_t k) {
  if (!o) return;
  for (const char* name : names) o(l.prefix + "." + name, x, m, k);
}

// x += fc2(gelu(fc1(layer_norm(x)))) over n rows; nx [n, d] and mid [n, ff] are scratch.
Status feed_forward(const WhisperLayer& l, int64_t n, int64_t d, int64_t ff, float eps, float* x,
                    float* nx, float* mid, float* y, const LinearObserver& o, ThreadPool& pool) {
  ops::layer_norm(x, n, d, l.ln_ffn_w.data(), l.ln_ffn_b.data(), eps, nx);
  observe(o, l, {"fc1"}, nx, n, d);
  QS_RETURN_IF_ERROR(ops::linear(nx, n, l.fc1, l.b1.data(), mid, pool));
  ops::gelu_erf(mid, n * ff);
  observe(o, l, {"fc2"}, mid, n, ff);
  QS_RETURN_IF_ERROR(ops::linear(mid, n, l.fc2, l.b2.data(), y, pool));
  ops::add_inplace(x, y, n * d);
  return ok_status();
}

}  // namespace

Status run_encoder_layers(std::span<const WhisperLayer> layers, int64_t heads, float eps,
                          std::span<const int64_t> bounds, float* x, int64_t n,
                          const LinearObserver& observer, ThreadPool& pool) {
  if (layers.empty()) return ok_status();
  const int64_t d = layers[0].attn.q.cols(), ff = layers[0].fc1.rows(), hd = d / heads;
  std::vector<float> nx(static_cast<size_t>(n * d)), q(nx.size()), k(nx.size()), v(nx.size()),
      a(nx.size()), y(nx.size()), mid(static_cast<size_t>(n * ff));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const WhisperLayer& l : layers) {
    ops::layer_norm(x, n, d, l.ln_attn_w.data(), l.ln_attn_b.data(), eps, nx.data());
    observe(observer, l, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, nx.data(), n,
            d);
    const ops::LinearOut qkv[] = {{&l.attn.q, l.attn.bq.data(), q.data()},
                                  {&l.attn.k, nullptr, k.data()},
                                  {&l.attn.v, l.attn.bv.data(), v.data()}};
    QS_RETURN_IF_ERROR(ops::linear_many(nx.data(), n, qkv, pool));
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      const int64_t s = bounds[i], len = bounds[i + 1] - s;
      const ops::DenseAttentionShape shape{len, len, heads, hd, d, d, d, d, scale};
      QS_RETURN_IF_ERROR(ops::dense_attention(q.data() + s * d, k.data() + s * d, v.data() + s * d,
                                              shape, a.data() + s * d, pool));
    }
    observe(observer, l, {"self_attn.out_proj"}, a.data(), n, d);
    QS_RETURN_IF_ERROR(ops::linear(a.data(), n, l.attn.o, l.attn.bo.data(), y.data(), pool));
    ops::add_inplace(x, y.data(), n * d);
    QS_RETURN_IF_ERROR(
        feed_forward(l, n, d, ff, eps, x, nx.data(), mid.data(), y.data(), observer, pool));
  }
  return ok_status();
}

Result<WhisperModel> WhisperModel::load(const std::string& dir) {
  WhisperModel m;
  QS_ASSIGN_OR_RETURN(m.weights_, models::Component::open(dir));
  const models::Component& c = m.weights_;
  QS_ASSIGN_OR_RETURN(m.config_, read_whisper_config(c));
  const WhisperConfig& f = m.config_;
  const int64_t d = f.d_model;
  QS_ASSIGN_OR_RETURN(m.conv1_w_, c.f32("model.encoder.conv1.weight", {d, f.num_mel_bins, 3}));
  QS_ASSIGN_OR_RETURN(m.conv1_b_, c.f32("model.encoder.conv1.bias", {d}));
  QS_ASSIGN_OR_RETURN(m.conv2_w_, c.f32("model.encoder.conv2.weight", {d, d, 3}));
  QS_ASSIGN_OR_RETURN(m.conv2_b_, c.f32("model.encoder.conv2.bias", {d}));
  QS_ASSIGN_OR_RETURN(m.enc_pos_,
                      c.f32("model.encoder.embed_positions.weight", {f.max_source_positions, d}));
  for (int64_t i = 0; i < f.encoder_layers; ++i) {
    QS_ASSIGN_OR_RETURN(WhisperLayer l, load_layer(c, "model.encoder.layers." + std::to_string(i),
                                                   d, f.encoder_ffn_dim, false));
    m.enc_layers_.push_back(std::move(l));
  }
  QS_RETURN_IF_ERROR(load_norm(c, "model.encoder.layer_norm", d, &m.enc_ln_w_, &m.enc_ln_b_));
  QS_ASSIGN_OR_RETURN(m.tok_emb_, c.get("model.decoder.embed_tokens.weight", {f.vocab_size, d}));
  QS_ASSIGN_OR_RETURN(m.dec_pos_,
                      c.f32("model.decoder.embed_positions.weight", {f.max_target_positions, d}));
  for (int64_t i = 0; i < f.decoder_layers; ++i) {
    QS_ASSIGN_OR_RETURN(WhisperLayer l, load_layer(c, "model.decoder.layers." + std::to_string(i),
                                                   d, f.decoder_ffn_dim, true));
    m.dec_layers_.push_back(std::move(l));
  }
  QS_RETURN_IF_ERROR(load_norm(c, "model.decoder.layer_norm", d, &m.dec_ln_w_, &m.dec_ln_b_));
  if (c.has("proj_out.weight") || c.has("proj_out.qweight")) {
    QS_ASSIGN_OR_RETURN(m.proj_out_, c.linear("proj_out", f.vocab_size, d, nullptr));
  } else {
    QS_ASSIGN_OR_RETURN(m.proj_out_, ops::with_panels(m.tok_emb_));
  }
  return m;
}

Status WhisperModel::encode(const float* features, std::vector<float>* out,
                            ThreadPool& pool) const {
  const WhisperConfig& f = config_;
  const int64_t d = f.d_model, frames = f.input_frames(), n = f.max_source_positions;
  const int64_t heads = f.encoder_attention_heads;
  // The two conv1d run as 1-row conv2d: [1, c, 1, frames].
  ops::Conv2dShape s1{1, f.num_mel_bins, 1, frames, d, 1, 3, 1, 0, 0, 1, 1};
  std::vector<float> c1(static_cast<size_t>(d * frames));
  QS_RETURN_IF_ERROR(ops::conv2d(features, s1, conv1_w_.data(), conv1_b_.data(), c1.data(), pool));
  ops::gelu_erf(c1.data(), d * frames);
  ops::Conv2dShape s2{1, d, 1, frames, d, 1, 3, 2, 0, 0, 1, 1};
  if (s2.out_w() != n) return internal_error("whisper: conv2 gives " + std::to_string(s2.out_w()));
  std::vector<float> c2(static_cast<size_t>(d * n));
  QS_RETURN_IF_ERROR(ops::conv2d(c1.data(), s2, conv2_w_.data(), conv2_b_.data(), c2.data(), pool));
  ops::gelu_erf(c2.data(), d * n);
  std::vector<float> x(static_cast<size_t>(n * d));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < d; ++j) x[t * d + j] = c2[j * n + t] + enc_pos_[t * d + j];
  }
  const int64_t whole[] = {0, n};
  QS_RETURN_IF_ERROR(run_encoder_layers(enc_layers_, heads, f.layer_norm_eps, whole, x.data(), n,
                                        observer_, pool));
  ops::layer_norm(x.data(), n, d, enc_ln_w_.data(), enc_ln_b_.data(), f.layer_norm_eps, x.data());
  *out = std::move(x);
  return ok_status();
}

Status WhisperModel::start(const float* enc, int64_t n_src, WhisperDecoderState* state,
                           ThreadPool& pool) const {
  const WhisperConfig& f = config_;
  const int64_t d = f.d_model, layers = f.decoder_layers;
  if (n_src <= 0 || n_src > f.max_source_positions) {
    return invalid_argument("whisper: " + std::to_string(n_src) + " encoder rows (1 to " +
                            std::to_string(f.max_source_positions) + ")");
  }
  WhisperDecoderState s;
  s.n_src = n_src;
  s.self_k.assign(static_cast<size_t>(layers * f.max_target_positions * d), 0.0f);
  s.self_v.assign(s.self_k.size(), 0.0f);
  auto cross_k = std::make_shared<std::vector<float>>(static_cast<size_t>(layers * n_src * d));
  auto cross_v = std::make_shared<std::vector<float>>(cross_k->size());
  for (int64_t i = 0; i < layers; ++i) {
    const WhisperAttention& x = dec_layers_[i].cross;
    float* k = cross_k->data() + i * n_src * d;
    float* v = cross_v->data() + i * n_src * d;
    const ops::LinearOut outs[] = {{&x.k, nullptr, k}, {&x.v, x.bv.data(), v}};
    observe(observer_, dec_layers_[i], {"encoder_attn.k_proj", "encoder_attn.v_proj"}, enc, n_src,
            d);
    QS_RETURN_IF_ERROR(ops::linear_many(enc, n_src, outs, pool));
  }
  s.cross_k = std::move(cross_k);
  s.cross_v = std::move(cross_v);
  *state = std::move(s);
  return ok_status();
}

Status WhisperModel::decode(std::span<WhisperDecoderState* const> states,
                            std::span<const std::vector<int32_t>> tokens, bool all_logits,
                            std::vector<float>* logits, ThreadPool& pool) const {
  const WhisperConfig& f = config_;
  const int64_t d = f.d_model, ff = f.decoder_ffn_dim, heads = f.decoder_attention_heads;
  const int64_t hd = d / heads, max_t = f.max_target_positions;
  if (states.size() != tokens.size() || states.empty()) {
    return invalid_argument("whisper: decode needs one token list per state");
  }
  std::vector<int64_t> offset(states.size() + 1, 0);
  for (size_t i = 0; i < states.size(); ++i) {
    const WhisperDecoderState& s = *states[i];
    const int64_t n = static_cast<int64_t>(tokens[i].size());
    if (s.n_src <= 0) return invalid_argument("whisper: decode on a state start() did not make");
    if (n == 0) return invalid_argument("whisper: decode with no tokens for a sequence");
    if (s.length + n > max_t) {
      return invalid_argument("whisper: " + std::to_string(s.length + n) +
                              " decoder positions, beyond max_target_positions " +
                              std::to_string(max_t));
    }
    for (int32_t id : tokens[i]) {
      if (id < 0 || id >= f.vocab_size) {
        return invalid_argument("whisper: token id " + std::to_string(id) + " out of range");
      }
    }
    offset[i + 1] = offset[i] + n;
  }
  const int64_t rows = offset.back();
  const float emb_scale = f.scale_embedding ? std::sqrt(static_cast<float>(d)) : 1.0f;
  std::vector<float> x(static_cast<size_t>(rows * d));
  for (size_t i = 0; i < states.size(); ++i) {
    for (int64_t t = 0; t < offset[i + 1] - offset[i]; ++t) {
      float* row = x.data() + (offset[i] + t) * d;
      const int64_t id = tokens[i][t], pos = states[i]->length + t;
      for (int64_t j = 0; j < d; ++j) {
        row[j] = load_as_f32(tok_emb_.dtype, tok_emb_.data, id * d + j) * emb_scale +
                 dec_pos_[pos * d + j];
      }
    }
  }
  std::vector<float> nx(x.size()), q(x.size()), k(x.size()), v(x.size()), a(x.size()), y(x.size()),
      mid(static_cast<size_t>(rows * ff));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const ops::AttentionParams params{heads, scale, 0};
  for (int64_t li = 0; li < f.decoder_layers; ++li) {
    const WhisperLayer& l = dec_layers_[li];
    ops::layer_norm(x.data(), rows, d, l.ln_attn_w.data(), l.ln_attn_b.data(), f.layer_norm_eps,
                    nx.data());
    observe(observer_, l, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, nx.data(),
            rows, d);
    const ops::LinearOut qkv[] = {{&l.attn.q, l.attn.bq.data(), q.data()},
                                  {&l.attn.k, nullptr, k.data()},
                                  {&l.attn.v, l.attn.bv.data(), v.data()}};
    QS_RETURN_IF_ERROR(ops::linear_many(nx.data(), rows, qkv, pool));
    for (size_t i = 0; i < states.size(); ++i) {
      WhisperDecoderState& s = *states[i];
      const int64_t n = offset[i + 1] - offset[i], past = s.length;
      float* ck = s.self_k.data() + li * max_t * d;
      float* cv = s.self_v.data() + li * max_t * d;
      std::copy_n(k.data() + offset[i] * d, n * d, ck + past * d);
      std::copy_n(v.data() + offset[i] * d, n * d, cv + past * d);
      // The cache is one block of max_t rows: new rows see the past and their own prefix.
      const ops::PagedKvLayer cache{DType::kF32, ck, cv, 1, max_t, heads, hd};
      const ops::AttentionSeq seq{0, n, past, kOneBlock};
      QS_RETURN_IF_ERROR(ops::paged_attention(q.data() + offset[i] * d, cache, {&seq, 1}, params,
                                              a.data() + offset[i] * d, pool));
    }
    observe(observer_, l, {"self_attn.out_proj"}, a.data(), rows, d);
    QS_RETURN_IF_ERROR(ops::linear(a.data(), rows, l.attn.o, l.attn.bo.data(), y.data(), pool));
    ops::add_inplace(x.data(), y.data(), rows * d);

    ops::layer_norm(x.data(), rows, d, l.ln_cross_w.data(), l.ln_cross_b.data(), f.layer_norm_eps,
                    nx.data());
    observe(observer_, l, {"encoder_attn.q_proj"}, nx.data(), rows, d);
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), rows, l.cross.q, l.cross.bq.data(), q.data(), pool));
    for (size_t i = 0; i < states.size(); ++i) {
      const WhisperDecoderState& s = *states[i];
      const int64_t n = offset[i + 1] - offset[i];
      const float* ck = s.cross_k->data() + li * s.n_src * d;
      const float* cv = s.cross_v->data() + li * s.n_src * d;
      float* out = a.data() + offset[i] * d;
      if (n == 1) {
        // A decode step: one query over every encoder row, which the decode kernel reads in
        // place. Placed at the last position, the causal rule lets it see them all. The
        // casts are for PagedKvLayer's pointers, which paged_kv_write writes through; attention
        // only reads them.
        const ops::PagedKvLayer cache{
            DType::kF32, const_cast<float*>(ck), const_cast<float*>(cv), 1, s.n_src, heads, hd};
        const ops::AttentionSeq seq{0, 1, s.n_src - 1, kOneBlock};
        QS_RETURN_IF_ERROR(
            ops::paged_attention(q.data() + offset[i] * d, cache, {&seq, 1}, params, out, pool));
      } else {
        // A prompt: many queries, worth the GEMM's transposed copy of the keys.
        const ops::DenseAttentionShape as{n, s.n_src, heads, hd, d, d, d, d, scale};
        QS_RETURN_IF_ERROR(ops::dense_attention(q.data() + offset[i] * d, ck, cv, as, out, pool));
      }
    }
    observe(observer_, l, {"encoder_attn.out_proj"}, a.data(), rows, d);
    QS_RETURN_IF_ERROR(ops::linear(a.data(), rows, l.cross.o, l.cross.bo.data(), y.data(), pool));
    ops::add_inplace(x.data(), y.data(), rows * d);
    QS_RETURN_IF_ERROR(feed_forward(l, rows, d, ff, f.layer_norm_eps, x.data(), nx.data(),
                                    mid.data(), y.data(), observer_, pool));
  }
  // Only the rows whose logits are wanted go through the final norm and the projection.
  std::vector<int64_t> keep;
  for (size_t i = 0; i < states.size(); ++i) {
    for (int64_t r = all_logits ? offset[i] : offset[i + 1] - 1; r < offset[i + 1]; ++r) {
      keep.push_back(r);
    }
  }
  const int64_t m = static_cast<int64_t>(keep.size());
  for (int64_t r = 0; r < m; ++r) std::copy_n(x.data() + keep[r] * d, d, nx.data() + r * d);
  ops::layer_norm(nx.data(), m, d, dec_ln_w_.data(), dec_ln_b_.data(), f.layer_norm_eps, nx.data());
  logits->resize(static_cast<size_t>(m * f.vocab_size));
  QS_RETURN_IF_ERROR(ops::linear(nx.data(), m, proj_out_, nullptr, logits->data(), pool));
  for (size_t i = 0; i < states.size(); ++i) states[i]->length += offset[i + 1] - offset[i];
  return ok_status();
}

}  // namespace qs::audio
