// diffusion: CLIPTextModel (see clip_text_model.h), as transformers' modeling_clip.py.
#include "diffusion/clip_text_model.h"

#include <algorithm>
#include <cmath>

#include "ops/activation.h"
#include "ops/dense_attention.h"
#include "ops/elementwise.h"

namespace qs::diffusion {

Result<ClipTextModel> ClipTextModel::load(const std::string& dir) {
  ClipTextModel m;
  QS_ASSIGN_OR_RETURN(m.weights_, models::Component::open(dir));
  const models::Component& c = m.weights_;
  ClipTextConfig& f = m.config_;
  QS_ASSIGN_OR_RETURN(f.vocab_size, c.int_field("vocab_size", 49408));
  QS_ASSIGN_OR_RETURN(f.hidden_size, c.int_field("hidden_size", 512));
  QS_ASSIGN_OR_RETURN(f.intermediate_size, c.int_field("intermediate_size", 2048));
  QS_ASSIGN_OR_RETURN(f.num_hidden_layers, c.int_field("num_hidden_layers", 12));
  QS_ASSIGN_OR_RETURN(f.num_attention_heads, c.int_field("num_attention_heads", 8));
  QS_ASSIGN_OR_RETURN(f.max_position_embeddings, c.int_field("max_position_embeddings", 77));
  QS_ASSIGN_OR_RETURN(double eps, c.number_field("layer_norm_eps", 1e-5));
  f.layer_norm_eps = static_cast<float>(eps);
  QS_ASSIGN_OR_RETURN(f.hidden_act, c.string_field("hidden_act", "quick_gelu"));
  QS_ASSIGN_OR_RETURN(f.eos_token_id, c.int_field("eos_token_id", 2));
  const std::string where = dir + "/config.json: ";
  if (f.hidden_act != "quick_gelu" && f.hidden_act != "gelu" && f.hidden_act != "gelu_new" &&
      f.hidden_act != "gelu_pytorch_tanh") {
    return unimplemented(where + "hidden_act \"" + f.hidden_act + "\"");
  }
  if (f.hidden_size <= 0 || f.num_attention_heads <= 0 ||
      f.hidden_size % f.num_attention_heads != 0 || f.vocab_size <= 0 ||
      f.vocab_size > (int64_t{1} << 24) || f.max_position_embeddings <= 0 ||
      f.max_position_embeddings > 4096 || f.intermediate_size <= 0 || f.num_hidden_layers < 0 ||
      f.num_hidden_layers > 256) {
    return invalid_argument(where + "sizes out of range");
  }
  const int64_t d = f.hidden_size, ff = f.intermediate_size;
  QS_ASSIGN_OR_RETURN(m.token_emb_, c.f32("embeddings.token_embedding.weight", {f.vocab_size, d}));
  QS_ASSIGN_OR_RETURN(
      m.pos_emb_, c.f32("embeddings.position_embedding.weight", {f.max_position_embeddings, d}));
  for (int64_t i = 0; i < f.num_hidden_layers; ++i) {
    const std::string p = "encoder.layers." + std::to_string(i);
    ClipLayer l;
    QS_ASSIGN_OR_RETURN(l.ln1_w, c.f32(p + ".layer_norm1.weight", {d}));
    QS_ASSIGN_OR_RETURN(l.ln1_b, c.f32(p + ".layer_norm1.bias", {d}));
    QS_ASSIGN_OR_RETURN(l.ln2_w, c.f32(p + ".layer_norm2.weight", {d}));
    QS_ASSIGN_OR_RETURN(l.ln2_b, c.f32(p + ".layer_norm2.bias", {d}));
    QS_ASSIGN_OR_RETURN(l.q, c.linear(p + ".self_attn.q_proj", d, d, &l.bq));
    QS_ASSIGN_OR_RETURN(l.k, c.linear(p + ".self_attn.k_proj", d, d, &l.bk));
    QS_ASSIGN_OR_RETURN(l.v, c.linear(p + ".self_attn.v_proj", d, d, &l.bv));
    QS_ASSIGN_OR_RETURN(l.o, c.linear(p + ".self_attn.out_proj", d, d, &l.bo));
    QS_ASSIGN_OR_RETURN(l.fc1, c.linear(p + ".mlp.fc1", ff, d, &l.b1));
    QS_ASSIGN_OR_RETURN(l.fc2, c.linear(p + ".mlp.fc2", d, ff, &l.b2));
    m.layers_.push_back(std::move(l));
  }
  QS_ASSIGN_OR_RETURN(m.final_w_, c.f32("final_layer_norm.weight", {d}));
  QS_ASSIGN_OR_RETURN(m.final_b_, c.f32("final_layer_norm.bias", {d}));
  return m;
}

Status ClipTextModel::forward(const std::vector<int32_t>& ids, std::vector<float>* hidden,
                              std::vector<float>* pooled, ThreadPool& pool) const {
  const ClipTextConfig& f = config_;
  const int64_t n = static_cast<int64_t>(ids.size()), d = f.hidden_size;
  const int64_t ff = f.intermediate_size, h = f.num_attention_heads, hd = d / h;
  if (n <= 0 || n > f.max_position_embeddings) {
    return invalid_argument("clip: " + std::to_string(n) + " tokens (1 to " +
                            std::to_string(f.max_position_embeddings) + ")");
  }
  std::vector<float> x(static_cast<size_t>(n * d));
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= f.vocab_size) {
      return invalid_argument("clip: token id " + std::to_string(ids[t]) + " out of range");
    }
    for (int64_t j = 0; j < d; ++j) x[t * d + j] = token_emb_[ids[t] * d + j] + pos_emb_[t * d + j];
  }
  std::vector<float> nx(x.size()), q(x.size()), k(x.size()), v(x.size()), a(x.size()), y(x.size()),
      mid(static_cast<size_t>(n * ff));
  ops::DenseAttentionShape s{n,   n, h, hd, d, d, d, d, 1.0f / std::sqrt(static_cast<float>(hd)),
                             true};
  for (const ClipLayer& l : layers_) {
    ops::layer_norm(x.data(), n, d, l.ln1_w.data(), l.ln1_b.data(), f.layer_norm_eps, nx.data());
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, l.q, l.bq.data(), q.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, l.k, l.bk.data(), k.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, l.v, l.bv.data(), v.data(), pool));
    QS_RETURN_IF_ERROR(ops::dense_attention(q.data(), k.data(), v.data(), s, a.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(a.data(), n, l.o, l.bo.data(), y.data(), pool));
    ops::add_inplace(x.data(), y.data(), n * d);
    ops::layer_norm(x.data(), n, d, l.ln2_w.data(), l.ln2_b.data(), f.layer_norm_eps, nx.data());
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, l.fc1, l.b1.data(), mid.data(), pool));
    if (f.hidden_act == "quick_gelu") {
      ops::quick_gelu(mid.data(), n * ff);
    } else if (f.hidden_act == "gelu") {
      ops::gelu_erf(mid.data(), n * ff);
    } else {
      ops::gelu_tanh(mid.data(), n * ff);
    }
    QS_RETURN_IF_ERROR(ops::linear(mid.data(), n, l.fc2, l.b2.data(), y.data(), pool));
    ops::add_inplace(x.data(), y.data(), n * d);
  }
  ops::layer_norm(x.data(), n, d, final_w_.data(), final_b_.data(), f.layer_norm_eps, x.data());
  if (pooled) {
    int64_t at = 0;
    if (f.eos_token_id == 2) {
      at = std::max_element(ids.begin(), ids.end()) - ids.begin();
    } else {
      auto it = std::find(ids.begin(), ids.end(), static_cast<int32_t>(f.eos_token_id));
      // transformers takes the first eos; without one its argmax finds position 0.
      at = it == ids.end() ? 0 : it - ids.begin();
    }
    pooled->assign(x.begin() + at * d, x.begin() + (at + 1) * d);
  }
  if (hidden) *hidden = std::move(x);
  return ok_status();
}

}  // namespace qs::diffusion
