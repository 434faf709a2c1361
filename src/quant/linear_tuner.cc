// quant: AutoRound for one linear outside the blocks (linear_tuner.h).
#include "quant/linear_tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "quant/fake_quant.h"
#include "quant/grad_ops.h"
#include "quant/tune_common.h"

namespace qs::quant {
namespace {

Status check_linear(int64_t n, int64_t k, const LinearCalibration& c) {
  if (n <= 0 || k <= 0) return invalid_argument("autoround: linear needs n > 0 and k > 0");
  if (c.n_samples <= 0 || c.seqlen <= 0 || c.inputs == nullptr) {
    return invalid_argument(
        "autoround: linear calibration needs inputs, n_samples > 0 and "
        "seqlen > 0");
  }
  return ok_status();
}

// Tokens per matmul: a sample's outputs are seqlen x n (an lm_head's n is the vocabulary), so
// they run in chunks of about 16 M floats; the loss and the weight gradient are sums over
// tokens, so chunking changes neither.
int64_t token_chunk(int64_t n, int64_t seqlen) {
  return std::clamp<int64_t>((int64_t{16} << 20) / n, 1, seqlen);
}

}  // namespace

Result<LinearTuneResult> tune_linear(const float* w, int64_t n, int64_t k,
                                     const formats::QuantScheme& scheme,
                                     const LinearCalibration& calib, const TuneOptions& opt,
                                     ThreadPool& pool, const TuneProgress& progress) {
  QS_RETURN_IF_ERROR(check_linear(n, k, calib));
  if (!scheme.quantized() || scheme.bits < 2 || scheme.bits > 8 ||
      (scheme.group_size != -1 && scheme.group_size <= 0)) {
    return invalid_argument(
        "autoround: linear scheme must be int with bits in [2, 8] and "
        "group_size -1 or > 0");
  }
  if (opt.iters < 1 || opt.batch_size < 1 || opt.gradient_accumulate_steps < 1 || opt.lr < 0 ||
      opt.minmax_lr < 0) {
    return invalid_argument(
        "autoround: linear tuning needs iters >= 1, batch_size >= 1, "
        "gradient_accumulate_steps >= 1 and lr, minmax_lr >= 0");
  }
  const float* fp = calib.fp_inputs != nullptr ? calib.fp_inputs : calib.inputs;
  const int64_t seqlen = calib.seqlen, row = seqlen * k, chunk = token_chunk(n, seqlen);
  FakeQuantLinear<float> fq =
      make_fake_quant<float>(w, n, k, scheme.bits, scheme.group_size, scheme.sym);
  const SignSgdRates rates = signsgd_rates(opt.iters, scheme.bits, opt.lr, opt.minmax_lr);
  // The tool's loop for these layers: batch 1, batch_size x gradient_accumulate_steps samples
  // accumulated per step.
  const int64_t global = std::min<int64_t>(
      static_cast<int64_t>(opt.batch_size) * opt.gradient_accumulate_steps, calib.n_samples);
  IndexSampler sampler(calib.n_samples, global, opt.seed);
  std::vector<float> wq(n * k), dw(n * k), y(chunk * n), t(chunk * n), dy(chunk * n);
  QdqCache<float> cache;
  SignSgdScratch sgd;
  TuneSnapshot best;
  LinearTuneResult result;
  result.best_loss = std::numeric_limits<double>::infinity();
  for (int it = 0; it < opt.iters; ++it) {
    qdq_forward<float>(fq, wq.data(), &cache);
    std::fill(dw.begin(), dw.end(), 0.0f);
    const std::vector<int64_t> samples = sampler.next();
    int64_t elements = 0;
    for (int64_t s : samples) {
      elements += real_tokens(calib.loss_mask ? calib.loss_mask + s * seqlen : nullptr, seqlen) * n;
    }
    const float scale = elements > 0 ? 1.0f / static_cast<float>(elements) : 0.0f;
    double sum = 0;
    for (int64_t s : samples) {
      for (int64_t t0 = 0; t0 < seqlen; t0 += chunk) {
        const int64_t m = std::min(chunk, seqlen - t0);
        const float* xq = calib.inputs + s * row + t0 * k;
        const uint8_t* lm = calib.loss_mask ? calib.loss_mask + s * seqlen + t0 : nullptr;
        linear_forward<float>(fp + s * row + t0 * k, m, k, w, n, nullptr, t.data(), pool,
                              opt.products);
        linear_forward<float>(xq, m, k, wq.data(), n, nullptr, y.data(), pool, opt.products);
        sum += squared_error(y.data(), t.data(), lm, m, n, scale, dy.data());
        linear_backward<float>(xq, dy.data(), m, k, wq.data(), n, nullptr, dw.data(), true, pool,
                               opt.products);
      }
    }
    const double loss = elements > 0 ? sum / static_cast<double>(elements) : 0.0;
    if (!std::isfinite(loss)) {
      return invalid_argument("autoround: the linear's loss is not finite at iteration " +
                              std::to_string(it) + " (inf or nan in the calibration data?)");
    }
    if (it == 0) result.initial_loss = loss;
    if (progress) progress(it, loss);
    if (loss < result.best_loss) {  // before the update; iteration 0 (RTN) included
      result.best_loss = loss;
      result.best_iter = it;
      best = {fq.v, fq.alpha, fq.beta};
    }
    const double decay = 1.0 - static_cast<double>(it) / opt.iters;
    signsgd_step(fq, cache, dw.data(), rates, decay, opt.enable_minmax_tuning, &sgd);
  }
  fq.v = std::move(best.v);
  fq.alpha = std::move(best.alpha);
  fq.beta = std::move(best.beta);
  qdq_forward<float>(fq, wq.data(), &cache);
  result.weight = to_quantized_weight(fq, cache);
  return result;
}

Result<double> linear_loss(const float* w, int64_t n, int64_t k,
                           const formats::QuantizedWeight* weight, const LinearCalibration& calib,
                           ThreadPool& pool) {
  QS_RETURN_IF_ERROR(check_linear(n, k, calib));
  if (weight != nullptr && (weight->n != n || weight->k != k)) {
    return invalid_argument("autoround: quantized weight shape does not match the linear");
  }
  std::vector<float> deq;
  const float* wl = w;
  if (weight != nullptr) {
    deq.resize(n * k);
    formats::dequantize(*weight, deq.data());
    wl = deq.data();
  }
  const float* fp = calib.fp_inputs != nullptr ? calib.fp_inputs : calib.inputs;
  const int64_t seqlen = calib.seqlen, row = seqlen * k, chunk = token_chunk(n, seqlen);
  std::vector<float> y(chunk * n), t(chunk * n);
  double sum = 0;
  int64_t elements = 0;
  for (int64_t s = 0; s < calib.n_samples; ++s) {
    for (int64_t t0 = 0; t0 < seqlen; t0 += chunk) {
      const int64_t m = std::min(chunk, seqlen - t0);
      const uint8_t* lm = calib.loss_mask ? calib.loss_mask + s * seqlen + t0 : nullptr;
      linear_forward<float>(fp + s * row + t0 * k, m, k, w, n, nullptr, t.data(), pool);
      linear_forward<float>(calib.inputs + s * row + t0 * k, m, k, wl, n, nullptr, y.data(), pool);
      sum += squared_error(y.data(), t.data(), lm, m, n, 0, nullptr);
      elements += real_tokens(lm, m) * n;
    }
  }
  return elements > 0 ? sum / static_cast<double>(elements) : 0.0;
}

}  // namespace qs::quant
