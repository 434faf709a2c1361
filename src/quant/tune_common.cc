// quant: the SignRound loops' shared parts (tune_common.h).
#include "quant/tune_common.h"

#include <algorithm>
#include <numeric>

namespace qs::quant {

IndexSampler::IndexSampler(int64_t n, int64_t batch, uint64_t seed)
    : order_(n), batch_(batch), rng_(seed) {
  shuffle();
}

std::vector<int64_t> IndexSampler::next() {
  if (pos_ + batch_ > static_cast<int64_t>(order_.size())) shuffle();
  std::vector<int64_t> out(order_.begin() + pos_, order_.begin() + pos_ + batch_);
  pos_ += batch_;
  return out;
}

void IndexSampler::shuffle() {
  std::iota(order_.begin(), order_.end(), 0);
  for (int64_t i = static_cast<int64_t>(order_.size()) - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng_() % static_cast<uint64_t>(i + 1));
    std::swap(order_[i], order_[j]);
  }
  pos_ = 0;
}

int64_t real_tokens(const uint8_t* mask, int64_t n) {
  if (mask == nullptr) return n;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += mask[i] != 0;
  return count;
}

double squared_error(const float* y, const float* t, const uint8_t* mask, int64_t tokens,
                     int64_t width, float scale, float* dy) {
  double sum = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    const bool real = mask == nullptr || mask[i] != 0;
    for (int64_t j = 0; j < width; ++j) {
      const float e = y[i * width + j] - t[i * width + j];
      if (real) sum += static_cast<double>(e) * e;
      if (dy != nullptr) dy[i * width + j] = real ? scale * 2.0f * e : 0.0f;
    }
  }
  return sum;
}

SignSgdRates signsgd_rates(int iters, int bits, double lr, double minmax_lr) {
  const double auto_lr = (iters >= 1000 && bits <= 3 ? 2.0 : 1.0) / std::max(iters, 1);
  SignSgdRates r;
  r.lr = lr > 0 ? lr : auto_lr;
  r.minmax_lr = minmax_lr > 0 ? minmax_lr : r.lr;
  return r;
}

namespace {
float sign(float g) {
  return g > 0 ? 1.0f : (g < 0 ? -1.0f : 0.0f);  // torch.sign: 0 stays 0
}
}  // namespace

void signsgd_step(FakeQuantLinear<float>& l, const QdqCache<float>& cache, const float* dwq,
                  const SignSgdRates& rates, double decay, bool minmax_tuning, SignSgdScratch* s) {
  s->gv.resize(l.v.size());
  s->galpha.resize(l.alpha.size());
  s->gbeta.resize(l.beta.size());
  qdq_backward<float>(l, cache, dwq, s->gv.data(), s->galpha.data(), s->gbeta.data());
  const float step = static_cast<float>(rates.lr * decay);
  for (size_t e = 0; e < l.v.size(); ++e)
    l.v[e] = std::clamp(l.v[e] - step * sign(s->gv[e]), -0.5f, 0.5f);
  if (!minmax_tuning) return;
  const float mstep = static_cast<float>(rates.minmax_lr * decay);
  for (size_t g = 0; g < l.alpha.size(); ++g) {
    l.alpha[g] = std::clamp(l.alpha[g] - mstep * sign(s->galpha[g]), 0.5f, 1.0f);
    l.beta[g] = std::clamp(l.beta[g] - mstep * sign(s->gbeta[g]), 0.5f, 1.0f);
  }
}

}  // namespace qs::quant
