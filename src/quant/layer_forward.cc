// quant: calibration forwards through the inference layer (layer_forward.h).
#include "quant/layer_forward.h"

#include <algorithm>

#include "engine/kv_cache.h"
#include "formats/rtn.h"
#include "quant/opt_rtn.h"

namespace qs::quant {
namespace {

// Samples per forward call: bounds the KV cache and scratch (a few x seqlen tokens) while
// keeping the matmuls batched.
constexpr int64_t kSamplesPerCall = 4;

// The linears of a layer in a fixed walk, so that a copy of the layer lines up with it.
template <class Layer, class Fn>
void for_each_linear(Layer& l, Fn fn) {
  for (auto* w : {&l.attn.wq, &l.attn.wk, &l.attn.wv, &l.attn.wo}) fn(*w);
  auto mlp = [&](auto& m) {
    if (m.empty()) return;
    fn(m.gate);
    fn(m.up);
    fn(m.down);
  };
  mlp(l.mlp);
  for (auto& e : l.moe.experts) mlp(e);
  mlp(l.moe.shared);
}

// Per linear: the sum over every token it saw of its input squared, per input channel.
class ImatrixObserver : public models::LinearInputObserver {
 public:
  void observe(const ops::LinearWeight* w, const float* x, int64_t rows) override {
    Entry& e = sums_[w];
    if (e.sums.empty()) e.sums.assign(w->cols(), 0.0);
    add_squares(x, rows, w->cols(), nullptr, e.sums.data());
    e.tokens += rows;
  }
  // nullptr when `w` saw no token.
  const std::vector<double>* sums(const ops::LinearWeight* w) const {
    auto it = sums_.find(w);
    return it == sums_.end() || it->second.tokens == 0 ? nullptr : &it->second.sums;
  }

 private:
  struct Entry {
    std::vector<double> sums;
    int64_t tokens = 0;
  };
  std::map<const ops::LinearWeight*, Entry> sums_;
};

}  // namespace

Status layer_forward(const models::Model& model, const models::DecoderLayerWeights& weights,
                     const float* x, int64_t n_samples, int64_t seqlen, float* y,
                     models::LinearInputObserver* observer, ThreadPool& pool) {
  const models::ModelConfig& c = model.config();
  const int64_t hidden = c.hidden_size, block = 16;
  const int64_t per_call = std::min(n_samples, kSamplesPerCall);
  engine::KvCache cache(
      {1, c.n_kv_heads, c.head_dim, per_call * ((seqlen + block - 1) / block), block});
  std::vector<int32_t> positions(per_call * seqlen);
  for (int64_t s = 0; s < per_call; ++s) {
    for (int64_t t = 0; t < seqlen; ++t) positions[s * seqlen + t] = static_cast<int32_t>(t);
  }
  std::vector<float> cos, sin;
  models::rope_tables(models::rope_inv_freq(c), positions, &cos, &sin);
  models::BlockScratch scratch;
  scratch.observer = observer;
  for (int64_t s0 = 0; s0 < n_samples; s0 += per_call) {
    const int64_t count = std::min(per_call, n_samples - s0);
    std::vector<ops::AttentionSeq> seqs;
    for (int64_t s = 0; s < count; ++s) {
      QS_RETURN_IF_ERROR(cache.reserve(s, seqlen));
      seqs.push_back({s * seqlen, seqlen, 0, cache.block_table(s)});
    }
    float* out = y + s0 * seqlen * hidden;
    std::copy_n(x + s0 * seqlen * hidden, count * seqlen * hidden, out);
    QS_RETURN_IF_ERROR(models::decoder_layer(c, weights, out, count * seqlen, cos.data(),
                                             sin.data(), cache.layers()[0], seqs, scratch, pool));
  }
  return ok_status();
}

Result<LayerOptRtn> opt_rtn_layer(const models::Model& model, int64_t index,
                                  const std::map<std::string, formats::QuantScheme>& schemes,
                                  const float* x_q, int64_t n_samples, int64_t seqlen,
                                  float* reference, float* y_q, ThreadPool& pool) {
  const models::DecoderLayerWeights& layer = model.layer(index);
  ImatrixObserver observer;
  QS_RETURN_IF_ERROR(
      layer_forward(model, layer, x_q, n_samples, seqlen, reference, &observer, pool));

  std::map<const ops::LinearWeight*, std::string> names;
  for (const models::LinearInfo& info : model.linears()) names[info.weight] = info.name;
  LayerOptRtn out;
  // The quantized twin: the same layer with each quantized linear replaced by its dequantized
  // f32 weight, for the quantized chain's forward.
  models::DecoderLayerWeights twin = layer;
  std::vector<ops::LinearWeight*> twin_linears;
  for_each_linear(twin, [&](ops::LinearWeight& w) { twin_linears.push_back(&w); });
  size_t j = 0;
  Status status = ok_status();
  for_each_linear(layer, [&](const ops::LinearWeight& w) {
    ops::LinearWeight* copy = twin_linears[j++];
    if (!status.ok()) return;
    const std::string& name = names[&w];
    auto it = schemes.find(name);
    if (it == schemes.end() || !it->second.quantized()) return;
    const formats::QuantScheme& s = it->second;
    if (w.quant != nullptr || w.dense.empty()) {
      status = invalid_argument(name + ": OPT-RTN needs the full-precision weight, found a " +
                                "quantized one");
      return;
    }
    const std::vector<float> f = w.dense.to_f32();
    const int64_t n = w.rows(), k = w.cols();
    const std::vector<double>* sums = observer.sums(&w);
    formats::QuantizedWeight q;
    if (s.bits >= 8 || sums == nullptr) {
      q = formats::rtn_quantize(f.data(), n, k, s.bits, s.group_size, s.sym);
      if (sums == nullptr) out.unrouted.push_back(name);
    } else {
      const std::vector<float> imatrix = imatrix_of(*sums, n_samples);
      q = opt_rtn(f.data(), n, k, s.bits, s.group_size, s.sym, imatrix.data(), &pool);
    }
    std::vector<float> dq(n * k);
    formats::dequantize(q, dq.data());
    *copy = ops::LinearWeight(Tensor::from_f32(DType::kF32, {n, k}, dq));
    out.weights.emplace(name, std::move(q));
  });
  QS_RETURN_IF_ERROR(status);
  QS_RETURN_IF_ERROR(layer_forward(model, twin, x_q, n_samples, seqlen, y_q, nullptr, pool));
  return out;
}

}  // namespace qs::quant
