// diffusion: T5EncoderModel and UMT5EncoderModel (see t5_encoder.h), as transformers'
// modeling_t5.py and modeling_umt5.py.
#include "diffusion/t5_encoder.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
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

Result<T5Config> read_t5_config(const models::Component& c) {
  T5Config f;
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
  const std::string where = c.dir() + "/config.json: ";
  // transformers: "gated-gelu" means gated with dense_act_fn "gelu_new".
  if (proj == "gated-gelu") {
    f.gated = true, f.act = "gelu_new";
  } else if (proj == "relu" || proj == "gated-relu") {
    f.gated = proj == "gated-relu", f.act = "relu";
  } else {
    return unimplemented(where + "feed_forward_proj \"" + proj + "\"");
  }
  // T5Config and UMT5Config derive is_gated_act and dense_act_fn from feed_forward_proj and
  // overwrite what the file says; a file whose saved values disagree was edited by hand, and
  // which of the two its author meant is unknown.
  QS_ASSIGN_OR_RETURN(bool gated_saved, c.bool_field("is_gated_act", f.gated));
  QS_ASSIGN_OR_RETURN(std::string act_saved, c.string_field("dense_act_fn", f.act));
  if (gated_saved != f.gated || act_saved != f.act) {
    return invalid_argument(where + "is_gated_act/dense_act_fn (" +
                            (gated_saved ? "true" : "false") + ", \"" + act_saved +
                            "\") contradict feed_forward_proj \"" + proj + "\"");
  }
  // tie_word_embeddings and the decoder's fields concern the LM head and the decoder, which
  // an encoder never runs.
  QS_ASSIGN_OR_RETURN(f.model_type, c.string_field("model_type", "t5"));
  if (f.model_type != "t5" && f.model_type != "umt5") {
    return unimplemented(where + "model_type \"" + f.model_type + "\" (expected t5 or umt5)");
  }
  if (f.d_model <= 0 || f.d_kv <= 0 || f.num_heads <= 0 || f.d_ff <= 0 || f.vocab_size <= 0 ||
      f.vocab_size > (int64_t{1} << 24) || f.num_layers <= 0 || f.num_layers > 256 ||
      f.relative_attention_num_buckets < 4 || f.relative_attention_max_distance <= 0) {
    return invalid_argument(where + "sizes out of range");
  }
  return f;
}

Result<T5Encoder> T5Encoder::load(const std::string& dir) {
  T5Encoder m;
  QS_ASSIGN_OR_RETURN(m.weights_, models::Component::open(dir));
  const models::Component& c = m.weights_;
  QS_ASSIGN_OR_RETURN(m.config_, read_t5_config(c));
  const T5Config& f = m.config_;
  const int64_t d = f.d_model, inner = f.num_heads * f.d_kv;
  const char* emb = c.has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
  QS_ASSIGN_OR_RETURN(m.embed_, c.get(emb, {f.vocab_size, d}));
  for (int64_t i = 0; i < f.num_layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".layer.";
    T5Layer l;
    if (i == 0 || f.model_type == "umt5") {
      QS_ASSIGN_OR_RETURN(l.rel_bias, c.f32(p + "0.SelfAttention.relative_attention_bias.weight",
                                            {f.relative_attention_num_buckets, f.num_heads}));
    }
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
  return forward(ids, static_cast<int64_t>(ids.size()), hidden, pool);
}

Status T5Encoder::forward(const std::vector<int32_t>& ids, int64_t n_valid,
                          std::vector<float>* hidden, ThreadPool& pool) const {
  const T5Config& f = config_;
  const int64_t n = static_cast<int64_t>(ids.size()), d = f.d_model, h = f.num_heads;
  const int64_t inner = h * f.d_kv;
  if (n <= 0 || n > 4096) return invalid_argument("t5: " + std::to_string(n) + " tokens");
  if (n_valid < 1 || n_valid > n) {
    return invalid_argument("t5: " + std::to_string(n_valid) + " unmasked tokens of " +
                            std::to_string(n) + " (must be 1 to " + std::to_string(n) + ")");
  }
  std::vector<float> x(static_cast<size_t>(n * d));
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= f.vocab_size) {
      return invalid_argument("t5: token id " + std::to_string(ids[t]) + " out of range");
    }
    for (int64_t e = 0; e < d; ++e) {
      x[t * d + e] = load_as_f32(embed_.dtype, embed_.data, ids[t] * d + e);
    }
  }
  // transformers adds finfo(f32).min to the scores of masked keys, whose softmax weight then
  // underflows to exactly 0: attending to the first n_valid keys only is the same sum, and
  // spares the padding's share of the attention.
  const int64_t n_kv = n_valid;
  std::vector<int64_t> buckets(static_cast<size_t>(n * n_kv));  // [n, n_kv], key - query
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n_kv; ++j) {
      buckets[i * n_kv + j] = t5_relative_bucket(j - i, f.relative_attention_num_buckets,
                                                 f.relative_attention_max_distance);
    }
  }
  // position_bias [heads, n, n_kv]: block 0's serves every block of T5, each UMT5 block has its
  // own.
  std::vector<float> bias(static_cast<size_t>(h * n * n_kv));
  std::vector<float> nx(x.size()), q(n * inner), k(n * inner), v(n * inner), a(n * inner),
      y(x.size()), g(static_cast<size_t>(n * f.d_ff)), u(g.size());
  ops::DenseAttentionShape s{n, n_kv, h, f.d_kv, inner, inner, inner, inner, 1.0f};
  s.bias = bias.data();
  for (const T5Layer& l : layers_) {
    if (!l.rel_bias.empty()) {
      for (int64_t i = 0; i < n * n_kv; ++i) {
        const float* table = l.rel_bias.data() + buckets[i] * h;
        for (int64_t hh = 0; hh < h; ++hh) bias[hh * n * n_kv + i] = table[hh];
      }
    }
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
