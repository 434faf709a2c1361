// quant: AutoRound block tuner (block_tuner.h).
#include "quant/block_tuner.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "quant/fake_quant.h"
#include "quant/tune_common.h"

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
  if (b.sparse() && (b.moe.top_k < 1 || b.moe.top_k > b.moe.n_experts ||
                     static_cast<int64_t>(b.router.size()) != b.moe.n_experts * b.hidden)) {
    return invalid_argument("autoround: an MoE block needs 1 <= top_k <= n_experts and a [" +
                            std::to_string(b.moe.n_experts) + ", " + std::to_string(b.hidden) +
                            "] router");
  }
  return ok_status();
}

// Which linears are tuned, validated.
Status check_schemes(const BlockTensors<float>& b, const PerLinear<formats::QuantScheme>& s) {
  if (static_cast<int64_t>(s.size()) != b.n_linears()) {
    return invalid_argument("autoround: " + std::to_string(s.size()) + " schemes for a block of " +
                            std::to_string(b.n_linears()) + " linears");
  }
  for (int i = 0; i < b.n_linears(); ++i) {
    if (!s[i].quantized()) continue;
    const std::string where = "autoround: " + b.linears[i].name + ": ";
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

// Calls fn(linear, thread) for every quantized linear across the pool, largest first, each
// linear whole on one thread, so results do not depend on which thread took it. The
// per-iteration weight work (fake-quant forward, its backward and the sign step, the best
// snapshot) is about a tenth of the tuner's wall time when one thread does it all while the
// others wait (perf, Qwen3-0.6B shape, 2 threads); claimed largest first from a counter, seven
// linears of 1-3 M weights split within one linear of even, and an MoE block's many experts
// evener still.
template <class Fn>
void for_each_linear(const TunableBlock& b, const PerLinear<formats::QuantScheme>& schemes,
                     ThreadPool& pool, const Fn& fn) {
  std::vector<int> order;
  for (int i = 0; i < b.n_linears(); ++i) {
    if (schemes[i].quantized()) order.push_back(i);
  }
  const int count = static_cast<int>(order.size());
  std::stable_sort(order.begin(), order.end(),
                   [&](int x, int y) { return b.out[x] * b.in[x] > b.out[y] * b.in[y]; });
  std::atomic<int> next{0};
  pool.run([&](int thread, int) {
    for (int j = next.fetch_add(1); j < count; j = next.fetch_add(1)) fn(order[j], thread);
  });
}

}  // namespace

Result<TuneResult> signsgd_tune(const TunableBlock& b,
                                const PerLinear<formats::QuantScheme>& schemes,
                                const TuneOptions& opt, ThreadPool& pool,
                                const TuneProgress& progress) {
  const int n_linears = b.n_linears();
  if (static_cast<int>(schemes.size()) != n_linears ||
      static_cast<int>(b.out.size()) != n_linears || static_cast<int>(b.in.size()) != n_linears ||
      b.n_samples <= 0 || !b.step || !b.elements) {
    return invalid_argument("autoround: " + std::to_string(schemes.size()) + " schemes for " +
                            std::to_string(n_linears) +
                            " linears, or no samples, or no step function");
  }
  for (int i = 0; i < n_linears; ++i) {
    if (!schemes[i].quantized()) continue;
    const std::string where =
        "autoround: " + (i < static_cast<int>(b.names.size()) ? b.names[i] : std::to_string(i)) +
        ": ";
    if (schemes[i].bits < 2 || schemes[i].bits > 8) {
      return invalid_argument(where + "bits must be in [2, 8], got " +
                              std::to_string(schemes[i].bits));
    }
    if (schemes[i].group_size != -1 && schemes[i].group_size <= 0) {
      return invalid_argument(where + "group_size must be -1 or > 0, got " +
                              std::to_string(schemes[i].group_size));
    }
  }
  if (opt.iters < 0 || opt.batch_size < 1 || opt.gradient_accumulate_steps < 1 || opt.lr < 0 ||
      opt.minmax_lr < 0) {
    return invalid_argument(
        "autoround: iters >= 0, batch_size >= 1, gradient_accumulate_steps >= 1 and lr, "
        "minmax_lr >= 0 required");
  }
  const int64_t batch = std::min<int64_t>(opt.batch_size, b.n_samples);

  PerLinear<FakeQuantLinear<float>> fq(n_linears);
  PerLinear<QdqCache<float>> cache(n_linears);
  PerLinear<std::vector<float>> wq(n_linears), dw(n_linears);
  PerLinear<const float*> wptr(n_linears);
  PerLinear<float*> dwptr(n_linears, nullptr);
  PerLinear<SignSgdRates> rates(n_linears);
  for (int i = 0; i < n_linears; ++i) {
    wptr[i] = b.w[i];
    if (!schemes[i].quantized()) continue;
    const auto size = static_cast<size_t>(b.out[i] * b.in[i]);
    fq[i] = make_fake_quant<float>(b.w[i], b.out[i], b.in[i], schemes[i].bits,
                                   schemes[i].group_size, schemes[i].sym);
    wq[i].resize(size);
    dw[i].resize(size);
    wptr[i] = wq[i].data();
    dwptr[i] = dw[i].data();
    rates[i] = signsgd_rates(opt.iters, schemes[i].bits, opt.lr, opt.minmax_lr);
  }

  TuneResult result;
  result.weights.resize(n_linears);
  result.best_loss = std::numeric_limits<double>::infinity();
  PerLinear<TuneSnapshot> best(n_linears);
  IndexSampler sampler(b.n_samples, batch, opt.seed);
  std::vector<SignSgdScratch> sgd(pool.n_threads());  // one per thread
  for (int it = 0; it < opt.iters; ++it) {
    for_each_linear(b, schemes, pool, [&](int i, int) {
      qdq_forward<float>(fq[i], wq[i].data(), &cache[i]);
      std::fill(dw[i].begin(), dw[i].end(), 0.0f);
    });
    std::vector<std::vector<int64_t>> batches(opt.gradient_accumulate_steps);
    int64_t elements = 0;
    for (auto& samples : batches) {
      samples = sampler.next();
      elements += b.elements(samples);
    }
    // Mean over the global batch (§1.4 item 4); the scale does not change sign updates.
    const float scale = elements > 0 ? 1.0f / static_cast<float>(elements) : 0.0f;
    double sum = 0;
    for (const auto& samples : batches) sum += b.step(samples, wptr, scale, dwptr);
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
      for_each_linear(b, schemes, pool, [&](int i, int) {
        best[i].v = fq[i].v;
        best[i].alpha = fq[i].alpha;
        best[i].beta = fq[i].beta;
      });
    }
    const double decay = 1.0 - static_cast<double>(it) / opt.iters;  // LinearLR 1 -> 0
    for_each_linear(b, schemes, pool, [&](int i, int thread) {
      signsgd_step(fq[i], cache[i], dw[i].data(), rates[i], decay, opt.enable_minmax_tuning,
                   &sgd[thread]);
    });
  }

  for (int i = 0; i < n_linears; ++i) {
    if (!schemes[i].quantized()) continue;
    if (opt.iters > 0) {
      fq[i].v = best[i].v;
      fq[i].alpha = best[i].alpha;
      fq[i].beta = best[i].beta;
    }
    qdq_forward<float>(fq[i], wq[i].data(), &cache[i]);
    result.weights[i] = to_quantized_weight(fq[i], cache[i]);
  }
  return result;
}

Result<TuneResult> tune_block(const BlockTensors<float>& b,
                              const PerLinear<formats::QuantScheme>& schemes,
                              const BlockCalibration& calib, const TuneOptions& opt,
                              ThreadPool& pool, const TuneProgress& progress) {
  QS_RETURN_IF_ERROR(check_calibration(b, calib, true));
  QS_RETURN_IF_ERROR(check_schemes(b, schemes));
  const int64_t hidden = b.hidden, seqlen = calib.seqlen, row = seqlen * hidden;
  const uint8_t* loss_mask = calib.loss_mask != nullptr ? calib.loss_mask : calib.mask;
  TunableBlock t;
  t.n_samples = calib.n_samples;
  for (int i = 0; i < b.n_linears(); ++i) {
    t.w.push_back(b.w[i].data());
    t.out.push_back(b.out_features(i));
    t.in.push_back(b.in_features(i));
    t.names.push_back(b.linears[i].name);
  }
  t.elements = [&](const std::vector<int64_t>& samples) {
    int64_t elements = 0;
    for (int64_t s : samples)
      elements += real_tokens(loss_mask ? loss_mask + s * seqlen : nullptr, seqlen) * hidden;
    return elements;
  };
  std::vector<float> x, tg, y, dy;
  std::vector<uint8_t> mask, lmask;
  BlockActivations<float> act;
  BlockBackwardScratch<float> grads;
  std::vector<uint8_t> routed(b.moe.n_experts, 0);  // experts some step's tokens reached
  t.step = [&](const std::vector<int64_t>& samples, const PerLinear<const float*>& wptr,
               float scale, const PerLinear<float*>& dwptr) {
    const int64_t n = static_cast<int64_t>(samples.size());
    gather(calib.inputs, row, samples, &x);
    gather(calib.targets, row, samples, &tg);
    if (calib.mask != nullptr) gather(calib.mask, seqlen, samples, &mask);
    if (loss_mask != nullptr) gather(loss_mask, seqlen, samples, &lmask);
    const uint8_t* m = calib.mask != nullptr ? mask.data() : nullptr;
    const uint8_t* lm = loss_mask != nullptr ? lmask.data() : nullptr;
    y.resize(n * row);
    dy.resize(n * row);
    block_forward<float>(b, wptr, x.data(), n, seqlen, m, &act, y.data(), pool);
    for (int64_t e = 0; e < b.moe.n_experts; ++e) {
      if (act.expert_first[e + 1] > act.expert_first[e]) routed[e] = 1;
    }
    const double sum = squared_error(y.data(), tg.data(), lm, n * seqlen, hidden, scale, dy.data());
    block_backward<float>(b, wptr, act, m, dy.data(), nullptr, dwptr, pool, &grads);
    return sum;
  };
  QS_ASSIGN_OR_RETURN(TuneResult result, signsgd_tune(t, schemes, opt, pool, progress));
  for (int i = 0; i < b.n_linears(); ++i) {
    const int64_t expert = b.linears[i].expert;
    if (schemes[i].quantized() && opt.iters > 0 && expert >= 0 && !routed[expert])
      result.unrouted.push_back(i);
  }
  if (opt.iters == 0) {
    PerLinear<const formats::QuantizedWeight*> ptrs(b.n_linears(), nullptr);
    for (int i = 0; i < b.n_linears(); ++i)
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
  if (static_cast<int64_t>(weights.size()) != b.n_linears()) {
    return invalid_argument("autoround: " + std::to_string(weights.size()) +
                            " weights for a block of " + std::to_string(b.n_linears()) +
                            " linears");
  }
  PerLinear<std::vector<float>> deq(b.n_linears());
  PerLinear<const float*> wptr(b.n_linears());
  for (int i = 0; i < b.n_linears(); ++i) {
    wptr[i] = b.w[i].data();
    if (weights[i] == nullptr) continue;
    if (weights[i]->n != b.out_features(i) || weights[i]->k != b.in_features(i)) {
      return invalid_argument("autoround: " + b.linears[i].name +
                              ": quantized weight shape does not match the block");
    }
    deq[i].resize(b.w[i].size());
    formats::dequantize(*weights[i], deq[i].data());
    wptr[i] = deq[i].data();
  }
  // A few samples at a time bound the saved activations' memory; one set of buffers serves
  // every chunk (fresh ones would be faulted in and cleared by the kernel anew each time).
  constexpr int64_t kChunk = 8;
  const int64_t row = calib.seqlen * b.hidden;
  BlockActivations<float> act;
  for (int64_t s0 = 0; s0 < calib.n_samples; s0 += kChunk) {
    const int64_t n = std::min(kChunk, calib.n_samples - s0);
    block_forward<float>(b, wptr, calib.inputs + s0 * row, n, calib.seqlen,
                         calib.mask ? calib.mask + s0 * calib.seqlen : nullptr, &act,
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
  return output_loss(y.data(), calib, b.hidden);
}

double output_loss(const float* y, const BlockCalibration& calib, int64_t hidden) {
  const int64_t tokens = calib.n_samples * calib.seqlen;
  const uint8_t* loss_mask = calib.loss_mask != nullptr ? calib.loss_mask : calib.mask;
  const int64_t elements = real_tokens(loss_mask, tokens) * hidden;
  const double sum = squared_error(y, calib.targets, loss_mask, tokens, hidden, 0, nullptr);
  return elements > 0 ? sum / static_cast<double>(elements) : 0.0;
}

}  // namespace qs::quant
