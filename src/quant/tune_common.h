// quant: what the two SignRound loops share, the decoder block's (block_tuner.cc) and the
// single linear's outside every block (linear_tuner.cc, autoround.md §1.4 item 11): the
// tool's batch sampler, the masked squared error and its gradient, and one SignSGD step of a
// fake-quantized linear.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "quant/fake_quant.h"

namespace qs::quant {

// The tool's IndexSampler: a seeded shuffle consumed batch by batch, reshuffled when fewer than
// a batch remain (so every batch holds distinct samples). Fisher-Yates on mt19937_64: not
// torch's generator, so the order differs from the tool's, but it is fixed for a seed.
class IndexSampler {
 public:
  IndexSampler(int64_t n, int64_t batch, uint64_t seed);
  std::vector<int64_t> next();

 private:
  void shuffle();
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

// How many of mask[0, n) are set (n when mask is nullptr).
int64_t real_tokens(const uint8_t* mask, int64_t n);

// Sum over real tokens of the squared error of y against t ([tokens, width]); with dy != nullptr
// also dy = scale * 2 (y - t) on real tokens, 0 elsewhere.
double squared_error(const float* y, const float* t, const uint8_t* mask, int64_t tokens,
                     int64_t width, float scale, float* dy);

// Step sizes of one linear (§1.4 item 6): lr = 1/iters (2/iters for runs of >= 1000 iterations
// at <= 3 bits) unless given; minmax_lr defaults to lr.
struct SignSgdRates {
  double lr = 0, minmax_lr = 0;
};
SignSgdRates signsgd_rates(int iters, int bits, double lr, double minmax_lr);

// Work buffers of signsgd_step, kept across iterations.
struct SignSgdScratch {
  std::vector<float> gv, galpha, gbeta;
};

// From dL/dwq of the last forward (whose cache is `cache`): V -= lr_t sign(dV), clipped to
// [-0.5, 0.5], and with minmax tuning alpha, beta -= minmax_lr_t sign(.), clipped to [0.5, 1],
// where lr_t = lr * decay (LinearLR). torch.sign: a zero gradient moves nothing.
void signsgd_step(FakeQuantLinear<float>& l, const QdqCache<float>& cache, const float* dwq,
                  const SignSgdRates& rates, double decay, bool minmax_tuning,
                  SignSgdScratch* scratch);

// V, alpha, beta of the best iteration so far.
struct TuneSnapshot {
  std::vector<float> v, alpha, beta;
};

}  // namespace qs::quant
