// quant: AutoRound block tuner (block_tuner.h).
#include "quant/block_tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "quant/fake_quant.h"

namespace qs::quant {
namespace {

Status check_calibration(const BlockTensors<float>& b, const BlockCalibration& c,
                         bool need_targets) {
  if (c.n_samples <= 0 || c.seqlen <= 0) {
    return invalid_argument("autoround: calibration needs n_samples > 0 and seqlen > 0, got " +
                            std::to_string(c.n_samples) + " x " + std::to_string(c.seqlen));
  }
  if (c.inputs == nullptr || (need_targets && c.targets == nullptr)) {
    return invalid_argument("autoround: calibration inputs or targets missing");
  }
  if (b.hidden <= 0 || b.n_heads <= 0 || b.n_kv_heads <= 0 || b.n_heads % b.n_kv_heads != 0 ||
      b.head_dim % 2 != 0) {
    return invalid_argument("autoround: inconsistent block dimensions");
  }
  return ok_status();
}

// Which linears are tuned, validated.
Status check_schemes(const BlockTensors<float>& b, const PerLinear<formats::QuantScheme>& s) {
  for (int i = 0; i < kNumLinears; ++i) {
    if (!s[i].quantized()) continue;
    const std::string where = std::string("autoround: ") + linear_name(i) + ": ";
    if (s[i].bits < 2 || s[i].bits > 8) {
      return invalid_argument(where + "bits must be in [2, 8], got " + std::to_string(s[i].bits));
    }
    if (s[i].group_size != -1 && s[i].group_size <= 0) {
      return invalid_argument(where + "group_size must be -1 or > 0, got " +
                              std::to_string(s[i].group_size));
    }
    if (static_cast<int64_t>(b.w[i].size()) != b.out_features(i) * b.in_features(i)) {
      return invalid_argument(where + "weight size does not match the block's dimensions");
    }
  }
  return ok_status();
}

// The tool's IndexSampler: a seeded shuffle consumed batch by batch, reshuffled when fewer than
// a batch remain (so every batch holds distinct samples). Fisher-Yates on mt19937_64: not
// torch's generator, so the order differs from the tool's, but it is fixed for a seed.
class IndexSampler {
 public:
  IndexSampler(int64_t n, int64_t batch, uint64_t seed) : order_(n), batch_(batch), rng_(seed) {
    shuffle();
  }
  std::vector<int64_t> next() {
    if (pos_ + batch_ > static_cast<int64_t>(order_.size())) shuffle();
    std::vector<int64_t> out(order_.begin() + pos_, order_.begin() + pos_ + batch_);
    pos_ += batch_;
    return out;
  }

 private:
  void shuffle() {
    std::iota(order_.begin(), order_.end(), 0);
    for (int64_t i = static_cast<int64_t>(order_.size()) - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng_() % static_cast<uint64_t>(i + 1));
      std::swap(order_[i], order_[j]);
    }
    pos_ = 0;
  }
  std::vector<int64_t> order_;
  int64_t batch_;
  int64_t pos_ = 0;
  std::mt19937_64 rng_;
};

// Copies the rows of `samples` out of a [n_samples, row] array.
template <class T>
void gather(const T* src, int64_t row, const std::vector<int64_t>& samples, std::vector<T>* dst) {
  dst->resize(samples.size() * row);
  for (size_t s = 0; s < samples.size(); ++s)
    std::copy_n(src + samples[s] * row, row, dst->data() + s * row);
}

int64_t real_tokens(const uint8_t* mask, int64_t n) {
  if (mask == nullptr) return n;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += mask[i] != 0;
  return count;
}

// Sum over real tokens of the squared error; with dy != nullptr also dy = scale * 2 (y - t)
// on real tokens, 0 on padding.
double squared_error(const float* y, const float* t, const uint8_t* mask, int64_t tokens,
                     int64_t hidden, float scale, float* dy) {
  double sum = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    const bool real = mask == nullptr || mask[i] != 0;
    for (int64_t j = 0; j < hidden; ++j) {
      const float e = y[i * hidden + j] - t[i * hidden + j];
      if (real) sum += static_cast<double>(e) * e;
      if (dy != nullptr) dy[i * hidden + j] = real ? scale * 2.0f * e : 0.0f;
    }
  }
  return sum;
}

float sign(float g) {
  return g > 0 ? 1.0f : (g < 0 ? -1.0f : 0.0f);  // torch.sign: 0 stays 0
}

struct Snapshot {
  std::vector<float> v, alpha, beta;
};

}  // namespace

Result<TuneResult> tune_block(const BlockTensors<float>& b,
                              const PerLinear<formats::QuantScheme>& schemes,
                              const BlockCalibration& calib, const TuneOptions& opt,
                              ThreadPool& pool, const TuneProgress& progress) {
  QS_RETURN_IF_ERROR(check_calibration(b, calib, true));
  QS_RETURN_IF_ERROR(check_schemes(b, schemes));
  if (opt.iters < 0 || opt.batch_size < 1 || opt.gradient_accumulate_steps < 1 || opt.lr < 0 ||
      opt.minmax_lr < 0) {
    return invalid_argument(
        "autoround: iters >= 0, batch_size >= 1, gradient_accumulate_steps >= 1 and lr, "
        "minmax_lr >= 0 required");
  }
  const int64_t hidden = b.hidden, seqlen = calib.seqlen, row = seqlen * hidden;
  const int64_t batch = std::min<int64_t>(opt.batch_size, calib.n_samples);

  PerLinear<FakeQuantLinear<float>> fq;
  PerLinear<QdqCache<float>> cache;
  PerLinear<std::vector<float>> wq, dw;
  PerLinear<const float*> wptr;
  PerLinear<float*> dwptr{};
  PerLinear<double> lr{}, minmax_lr{};
  for (int i = 0; i < kNumLinears; ++i) {
    wptr[i] = b.w[i].data();
    if (!schemes[i].quantized()) continue;
    fq[i] = make_fake_quant<float>(b.w[i].data(), b.out_features(i), b.in_features(i),
                                   schemes[i].bits, schemes[i].group_size, schemes[i].sym);
    wq[i].resize(b.w[i].size());
    dw[i].resize(b.w[i].size());
    wptr[i] = wq[i].data();
    dwptr[i] = dw[i].data();
    // §1.4 item 6: lr = 1/iters, 2/iters for long low-bit runs; minmax_lr defaults to lr.
    const double auto_lr =
        (opt.iters >= 1000 && schemes[i].bits <= 3 ? 2.0 : 1.0) / std::max(opt.iters, 1);
    lr[i] = opt.lr > 0 ? opt.lr : auto_lr;
    minmax_lr[i] = opt.minmax_lr > 0 ? opt.minmax_lr : lr[i];
  }

  TuneResult result;
  result.best_loss = std::numeric_limits<double>::infinity();
  PerLinear<Snapshot> best;
  IndexSampler sampler(calib.n_samples, batch, opt.seed);
  std::vector<float> x, t, y, dy;
  std::vector<uint8_t> mask, lmask;
  const uint8_t* loss_mask = calib.loss_mask != nullptr ? calib.loss_mask : calib.mask;
  BlockActivations<float> act;
  BlockBackwardScratch<float> grads;
  PerLinear<std::vector<float>> gv, ga, gb;
  for (int it = 0; it < opt.iters; ++it) {
    for (int i = 0; i < kNumLinears; ++i) {
      if (!schemes[i].quantized()) continue;
      qdq_forward<float>(fq[i], wq[i].data(), &cache[i]);
      std::fill(dw[i].begin(), dw[i].end(), 0.0f);
    }
    std::vector<std::vector<int64_t>> batches(opt.gradient_accumulate_steps);
    int64_t elements = 0;
    for (auto& samples : batches) {
      samples = sampler.next();
      for (int64_t s : samples)
        elements += real_tokens(loss_mask ? loss_mask + s * seqlen : nullptr, seqlen) * hidden;
    }
    // Mean over the global batch (§1.4 item 4); the scale does not change sign updates.
    const float scale = elements > 0 ? 1.0f / static_cast<float>(elements) : 0.0f;
    double sum = 0;
    for (const auto& samples : batches) {
      const int64_t n = static_cast<int64_t>(samples.size());
      gather(calib.inputs, row, samples, &x);
      gather(calib.targets, row, samples, &t);
      if (calib.mask != nullptr) gather(calib.mask, seqlen, samples, &mask);
      if (loss_mask != nullptr) gather(loss_mask, seqlen, samples, &lmask);
      const uint8_t* m = calib.mask != nullptr ? mask.data() : nullptr;
      const uint8_t* lm = loss_mask != nullptr ? lmask.data() : nullptr;
      y.resize(n * row);
      dy.resize(n * row);
      block_forward<float>(b, wptr, x.data(), n, seqlen, m, &act, y.data(), pool);
      sum += squared_error(y.data(), t.data(), lm, n * seqlen, hidden, scale, dy.data());
      block_backward<float>(b, wptr, act, m, dy.data(), nullptr, dwptr, pool, &grads);
    }
    const double loss = elements > 0 ? sum / static_cast<double>(elements) : 0.0;
    if (!std::isfinite(loss)) {
      return invalid_argument("autoround: the block's loss is not finite at iteration " +
                              std::to_string(it) + " (inf or nan in the calibration data?)");
    }
    if (it == 0) result.initial_loss = loss;
    if (progress) progress(it, loss);
    if (loss < result.best_loss) {  // §1.4 item 8: before the update, step 0 (RTN) included
      result.best_loss = loss;
      result.best_iter = it;
      for (int i = 0; i < kNumLinears; ++i) {
        if (schemes[i].quantized()) best[i] = {fq[i].v, fq[i].alpha, fq[i].beta};
      }
    }
    const double decay = 1.0 - static_cast<double>(it) / opt.iters;  // LinearLR 1 -> 0
    for (int i = 0; i < kNumLinears; ++i) {
      if (!schemes[i].quantized()) continue;
      FakeQuantLinear<float>& l = fq[i];
      gv[i].resize(l.v.size());
      ga[i].resize(l.alpha.size());
      gb[i].resize(l.beta.size());
      qdq_backward<float>(l, cache[i], dw[i].data(), gv[i].data(), ga[i].data(), gb[i].data());
      const float step = static_cast<float>(lr[i] * decay);
      for (size_t e = 0; e < l.v.size(); ++e)
        l.v[e] = std::clamp(l.v[e] - step * sign(gv[i][e]), -0.5f, 0.5f);
      if (!opt.enable_minmax_tuning) continue;
      const float mstep = static_cast<float>(minmax_lr[i] * decay);
      for (size_t g = 0; g < l.alpha.size(); ++g) {
        l.alpha[g] = std::clamp(l.alpha[g] - mstep * sign(ga[i][g]), 0.5f, 1.0f);
        l.beta[g] = std::clamp(l.beta[g] - mstep * sign(gb[i][g]), 0.5f, 1.0f);
      }
    }
  }

  for (int i = 0; i < kNumLinears; ++i) {
    if (!schemes[i].quantized()) continue;
    if (opt.iters > 0) {
      fq[i].v = best[i].v;
      fq[i].alpha = best[i].alpha;
      fq[i].beta = best[i].beta;
    }
    qdq_forward<float>(fq[i], wq[i].data(), &cache[i]);
    result.weights[i] = to_quantized_weight(fq[i], cache[i]);
  }
  if (opt.iters == 0) {
    PerLinear<const formats::QuantizedWeight*> ptrs{};
    for (int i = 0; i < kNumLinears; ++i)
      ptrs[i] = result.weights[i] ? &*result.weights[i] : nullptr;
    QS_ASSIGN_OR_RETURN(const double rtn, block_loss(b, ptrs, calib, pool));
    result.initial_loss = result.best_loss = rtn;
  }
  return result;
}

Result<TuneResult> tune_block(const models::DecoderLayerWeights& layer,
                              const models::ModelConfig& config, int64_t layer_index,
                              const PerLinear<formats::QuantScheme>& schemes,
                              const BlockCalibration& calib, const TuneOptions& options,
                              ThreadPool& pool, const TuneProgress& progress) {
  QS_ASSIGN_OR_RETURN(const BlockTensors<float> block, copy_block(layer, config, layer_index));
  return tune_block(block, schemes, calib, options, pool, progress);
}

Status block_output(const BlockTensors<float>& b,
                    const PerLinear<const formats::QuantizedWeight*>& weights,
                    const BlockCalibration& calib, float* out, ThreadPool& pool) {
  QS_RETURN_IF_ERROR(check_calibration(b, calib, false));
  PerLinear<std::vector<float>> deq;
  PerLinear<const float*> wptr;
  for (int i = 0; i < kNumLinears; ++i) {
    wptr[i] = b.w[i].data();
    if (weights[i] == nullptr) continue;
    if (weights[i]->n != b.out_features(i) || weights[i]->k != b.in_features(i)) {
      return invalid_argument(std::string("autoround: ") + linear_name(i) +
                              ": quantized weight shape does not match the block");
    }
    deq[i].resize(b.w[i].size());
    formats::dequantize(*weights[i], deq[i].data());
    wptr[i] = deq[i].data();
  }
  // A few samples at a time bound the saved activations' memory.
  constexpr int64_t kChunk = 8;
  const int64_t row = calib.seqlen * b.hidden;
  for (int64_t s0 = 0; s0 < calib.n_samples; s0 += kChunk) {
    const int64_t n = std::min(kChunk, calib.n_samples - s0);
    block_forward<float>(b, wptr, calib.inputs + s0 * row, n, calib.seqlen,
                         calib.mask ? calib.mask + s0 * calib.seqlen : nullptr, nullptr,
                         out + s0 * row, pool);
  }
  return ok_status();
}

Result<double> block_loss(const BlockTensors<float>& b,
                          const PerLinear<const formats::QuantizedWeight*>& weights,
                          const BlockCalibration& calib, ThreadPool& pool) {
  QS_RETURN_IF_ERROR(check_calibration(b, calib, true));
  std::vector<float> y(calib.n_samples * calib.seqlen * b.hidden);
  QS_RETURN_IF_ERROR(block_output(b, weights, calib, y.data(), pool));
  const int64_t tokens = calib.n_samples * calib.seqlen;
  const uint8_t* loss_mask = calib.loss_mask != nullptr ? calib.loss_mask : calib.mask;
  const int64_t elements = real_tokens(loss_mask, tokens) * b.hidden;
  const double sum =
      squared_error(y.data(), calib.targets, loss_mask, tokens, b.hidden, 0, nullptr);
  return elements > 0 ? sum / static_cast<double>(elements) : 0.0;
}

}  // namespace qs::quant
