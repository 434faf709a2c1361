// quant: AutoRound for a linear outside every decoder block (autoround.md §1.4 item 11: lm_head
// with --quant_lm_head). The same SignRound as tune_block, on one layer: its target is the
// full-precision layer on the full-precision model's inputs, its tuned output the fake-quantized
// layer on the quantized model's inputs (enable_quanted_input), and, as the tool forces for
// these layers, each iteration runs batch_size x gradient_accumulate_steps samples one at a
// time, summing their gradients: an lm_head's outputs are vocab-wide, so a whole batch of them
// would not fit. Targets are recomputed per sample for the same reason.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "quant/block_tuner.h"

namespace qs::quant {

// [n_samples, seqlen, in_features] row-major f32 each; loss_mask [n_samples, seqlen] (1 = the
// position counts in the loss; nullptr = all).
struct LinearCalibration {
  const float* inputs = nullptr;     // the quantized model's inputs to the layer (X_q)
  const float* fp_inputs = nullptr;  // the full-precision model's (X_fp); nullptr = inputs
  const uint8_t* loss_mask = nullptr;
  int64_t n_samples = 0;
  int64_t seqlen = 0;
};

struct LinearTuneResult {
  formats::QuantizedWeight weight;  // the best snapshot, f16 scales as tuned
  double initial_loss = 0;          // iteration 0 (plain RTN): MSE per output element
  double best_loss = 0;
  int best_iter = 0;
};

// Tunes w [n, k] (f32, owned by the caller) under `scheme` (bits in [2, 8], group_size -1 or
// > 0) on `calib` with options.iters SignSGD steps (iters >= 1; lr, minmax_lr, seed as for
// blocks). `progress` hears each iteration's loss before its update.
Result<LinearTuneResult> tune_linear(const float* w, int64_t n, int64_t k,
                                     const formats::QuantScheme& scheme,
                                     const LinearCalibration& calib, const TuneOptions& options,
                                     ThreadPool& pool, const TuneProgress& progress = {});

// The loss of a quantized weight (nullptr: w itself) over the whole calibration set, as
// tune_linear measures it: MSE per output element over the loss positions.
Result<double> linear_loss(const float* w, int64_t n, int64_t k,
                           const formats::QuantizedWeight* weight, const LinearCalibration& calib,
                           ThreadPool& pool);

}  // namespace qs::quant
