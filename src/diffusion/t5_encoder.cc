// diffusion: T5EncoderModel (see t5_encoder.h), as transformers' modeling_t5.py.
#include "diffusion/t5_encoder.h"

#include <cmath>

#include "ops/activation.h"
#include "ops/dense_attention.h"
#include "ops/elementwise.h"

namespace qs::diffusion {

int64_t t5_relative_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance) {
  num_buckets /= 2;
  int64_t bucket = relative_position > 0 ? num_buckets : 0;
  const int64_t rp = relative_position < 0 ? -relative_position : relative_position;
  const int64_t max_exact = num_buckets / 2;
  if (rp < max_exact) return bucket + rp;
  // In f32 and truncated toward zero, as torch computes it.
  const float scaled = std::log(static_cast<float>(rp) / static_cast<float>(max_exact)) /
                       static_cast<float>(std::log(static_cast<double>(max_distance) /
                                                   static_cast<double>(max_exact))) *
                       static_cast<float>(num_buckets - max_exact);
  const int64_t large = std::min(max_exact + static_cast<int64_t>(scaled), num_buckets - 1);
  return bucket + large;
}

Result<T5Encoder> T5Encoder::load(const std::string& dir) {
  T5Encoder m;
  QS_ASSIGN_OR_RETURN(m.weights_, models::Component::open(dir));
  const models::Component& c = m.weights_;
  T5Config& f = m.config_;
  QS_ASSIGN_OR_RETURN(f.vocab_size, c.int_field("vocab_size", 32128));
  QS_ASSIGN_OR_RETURN(f.d_model, c.int_field("d_model", 512));
  QS_ASSIGN_OR_RETURN(f.d_kv, c.int_field("d_kv", 64));
  QS_ASSIGN_OR_RETURN(f.d_ff, c.int_field("d_ff", 2048));
  QS_ASSIGN_OR_RETURN(f.num_layers, c.int_field("num_layers", 6));
  QS_ASSIGN_OR_RETURN(f.num_heads, c.int_field("num_heads", 8));
  QS_ASSIGN_OR_RETURN(f.relative_attention_num_buckets,
                      c.int_field("relative_attention_num_buckets", 32));
  QS_ASSIGN_OR_RETURN(f.relative_attention_max_distance,
                      c.int_field("relative_attention_max_distance", 128));
  QS_ASSIGN_OR_RETURN(double eps, c.number_field("layer_norm_epsilon", 1e-6));
  f.layer_norm_epsilon = static_cast<float>(eps);
  QS_ASSIGN_OR_RETURN(std::string proj, c.string_field("feed_forward_proj", "relu"));
  const std::string where = dir + "/config.json: ";
  // transformers: "gated-gelu" means gated with dense_act_fn "gelu_new".
  if (proj == "gated-gelu") {
    f.gated = true, f.act = "gelu_new";
  } else if (proj == "relu" || proj == "gated-relu") {
    f.gated = proj == "gated-relu", f.act = "relu";
  } else {
    return unimplemented(where + "feed_forward_proj \"" + proj + "\"");
  }
  if (f.d_model <= 0 || f.d_kv <= 0 || f.num_heads <= 0 || f.d_ff <= 0 || f.vocab_size <= 0 ||
      f.vocab_size > (int64_t{1} << 24) || f.num_layers <= 0 || f.num_layers > 256 ||
      f.relative_attention_num_buckets < 4 || f.relative_attention_max_distance <= 0) {
    return invalid_argument(where + "sizes out of range");
  }
  const int64_t d = f.d_model, inner = f.num_heads * f.d_kv;
  const char* emb = c.has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
  QS_ASSIGN_OR_RETURN(m.embed_, c.f32(emb, {f.vocab_size, d}));
  QS_ASSIGN_OR_RETURN(m.rel_bias_,
                      c.f32("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                            {f.relative_attention_num_buckets, f.num_heads}));
  for (int64_t i = 0; i < f.num_layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".layer.";
    T5Layer l;
    QS_ASSIGN_OR_RETURN(l.ln_attn, c.f32(p + "0.layer_norm.weight", {d}));
    QS_ASSIGN_OR_RETURN(l.q, c.linear(p + "0.SelfAttention.q", inner, d, nullptr));
    QS_ASSIGN_OR_RETURN(l.k, c.linear(p + "0.SelfAttention.k", inner, d, nullptr));
    QS_ASSIGN_OR_RETURN(l.v, c.linear(p + "0.SelfAttention.v", inner, d, nullptr));
    QS_ASSIGN_OR_RETURN(l.o, c.linear(p + "0.SelfAttention.o", d, inner, nullptr));
    QS_ASSIGN_OR_RETURN(l.ln_ff, c.f32(p + "1.layer_norm.weight", {d}));
    if (f.gated) {
      QS_ASSIGN_OR_RETURN(l.wi_0, c.linear(p + "1.DenseReluDense.wi_0", f.d_ff, d, nullptr));
      QS_ASSIGN_OR_RETURN(l.wi_1, c.linear(p + "1.DenseReluDense.wi_1", f.d_ff, d, nullptr));
    } else {
      QS_ASSIGN_OR_RETURN(l.wi_0, c.linear(p + "1.DenseReluDense.wi", f.d_ff, d, nullptr));
    }
    QS_ASSIGN_OR_RETURN(l.wo, c.linear(p + "1.DenseReluDense.wo", d, f.d_ff, nullptr));
    m.layers_.push_back(std::move(l));
  }
  QS_ASSIGN_OR_RETURN(m.final_ln_, c.f32("encoder.final_layer_norm.weight", {d}));
  return m;
}

Status T5Encoder::forward(const std::vector<int32_t>& ids, std::vector<float>* hidden,
                          ThreadPool& pool) const {
  const T5Config& f = config_;
  const int64_t n = static_cast<int64_t>(ids.size()), d = f.d_model, h = f.num_heads;
  const int64_t inner = h * f.d_kv;
  if (n <= 0 || n > 4096) return invalid_argument("t5: " + std::to_string(n) + " tokens");
  std::vector<float> x(static_cast<size_t>(n * d));
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= f.vocab_size) {
      return invalid_argument("t5: token id " + std::to_string(ids[t]) + " out of range");
    }
    std::copy(embed_.begin() + ids[t] * d, embed_.begin() + (ids[t] + 1) * d, x.begin() + t * d);
  }
  // position_bias [heads, n, n], shared by every block.
  std::vector<float> bias(static_cast<size_t>(h * n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t bucket = t5_relative_bucket(j - i, f.relative_attention_num_buckets,
                                                f.relative_attention_max_distance);
      for (int64_t hh = 0; hh < h; ++hh) bias[(hh * n + i) * n + j] = rel_bias_[bucket * h + hh];
    }
  }
  std::vector<float> nx(x.size()), q(n * inner), k(n * inner), v(n * inner), a(n * inner),
      y(x.size()), g(static_cast<size_t>(n * f.d_ff)), u(g.size());
  ops::DenseAttentionShape s{n, n, h, f.d_kv, inner, inner, inner, inner, 1.0f, false, bias.data()};
  for (const T5Layer& l : layers_) {
    ops::rms_norm(x.data(), n, d, l.ln_attn.data(), f.layer_norm_epsilon, nx.data());
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, l.q, nullptr, q.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, l.k, nullptr, k.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, l.v, nullptr, v.data(), pool));
    QS_RETURN_IF_ERROR(ops::dense_attention(q.data(), k.data(), v.data(), s, a.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(a.data(), n, l.o, nullptr, y.data(), pool));
    ops::add_inplace(x.data(), y.data(), n * d);
    ops::rms_norm(x.data(), n, d, l.ln_ff.data(), f.layer_norm_epsilon, nx.data());
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, l.wi_0, nullptr, g.data(), pool));
    if (f.act == "gelu_new") {
      ops::gelu_tanh(g.data(), n * f.d_ff);
    } else {
      for (float& e : g) e = e > 0 ? e : 0.0f;
    }
    if (f.gated) {
      QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, l.wi_1, nullptr, u.data(), pool));
      for (size_t i = 0; i < g.size(); ++i) g[i] *= u[i];
    }
    QS_RETURN_IF_ERROR(ops::linear(g.data(), n, l.wo, nullptr, y.data(), pool));
    ops::add_inplace(x.data(), y.data(), n * d);
  }
  ops::rms_norm(x.data(), n, d, final_ln_.data(), f.layer_norm_epsilon, x.data());
  *hidden = std::move(x);
  return ok_status();
}

}  // namespace qs::diffusion
