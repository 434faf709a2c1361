// quant: AutoRound (SignRound) for one decoder block, autoround.md §1.4: tunes every quantized
// linear's rounding offsets V and min/max scale coefficients alpha, beta by signed gradient
// descent on the MSE between the fake-quantized block's output on the quantized chain's inputs
// and the full-precision block's outputs, and returns the best snapshot as quantized weights.
// The calibration pipeline (capturing block inputs, export) calls this once per block.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "quant/block.h"

namespace qs::quant {

// The tool's defaults (autoround.md §1.4 items 5-8; recipe "default" of §1.8).
struct TuneOptions {
  int iters = 200;       // 0: no tuning, plain RTN (the pipeline may use opt_rtn instead)
  double lr = 0;         // 0: 1/iters, or 2/iters when iters >= 1000 and bits <= 3 (per linear)
  double minmax_lr = 0;  // 0: the linear's lr
  int batch_size = 8;    // samples per step (capped at n_samples)
  int gradient_accumulate_steps = 1;  // mini-batches summed into one step
  uint64_t seed = 42;                 // batch sampling order
  bool enable_minmax_tuning = true;   // false: alpha = beta = 1 stay fixed, only V is tuned
  // The products of tune_linear (lm_head); a block's are BlockTensors::products.
  ops::Products products = ops::Products::kF32;
};

// Calibration data of one block, row-major f32:
//   inputs  [n_samples, seqlen, hidden]: the block's inputs on the quantized chain (X_q; for
//           block 0 the embeddings), §1.4 item 3;
//   targets [n_samples, seqlen, hidden]: the full-precision block's outputs on the FP chain;
//   mask    [n_samples, seqlen]: 1 = a real token, 0 = padding (never attended to); nullptr =
//           every position real. Positions are 0..seqlen-1 per sample.
//   loss_mask [n_samples, seqlen]: 1 = the position counts in the loss; nullptr = `mask`. The
//           tool (v0.15, §1.4 item 4) also drops each sample's last position and trailing
//           repeated tokens from the loss without hiding them from attention.
struct BlockCalibration {
  const float* inputs = nullptr;
  const float* targets = nullptr;
  const uint8_t* mask = nullptr;
  const uint8_t* loss_mask = nullptr;
  int64_t n_samples = 0;
  int64_t seqlen = 0;
};

struct TuneResult {
  // Per linear (the block's linears' order): the tuned weight with f16 scales exactly as tuning
  // used them, or nullopt for a linear whose scheme is not quantized (kept in full precision).
  PerLinear<std::optional<formats::QuantizedWeight>> weights;
  // The quantized linears of MoE experts no calibration token was routed to in any step: no
  // gradient reached them, so they are plain RTN (SignSGD's sign(0) = 0 leaves them).
  std::vector<int> unrouted;
  double initial_loss = 0;  // mini-batch loss at iteration 0, i.e. with plain RTN weights
  double best_loss = 0;     // the lowest mini-batch loss seen; its parameters are returned
  int best_iter = 0;        // iteration of best_loss; 0 = RTN was never beaten
};

// Called after each iteration's loss (before the update).
using TuneProgress = std::function<void(int iter, double loss)>;

// A block as the SignSGD loop sees it, whatever its architecture (a decoder block here, a Wan
// block in wan_tuner.h): its linears' full-precision weights and one mini-batch's
// reconstruction error with its gradient.
struct TunableBlock {
  PerLinear<const float*> w;     // [out, in] each, full precision
  PerLinear<int64_t> out, in;    // each linear's shape
  PerLinear<std::string> names;  // for errors
  int64_t n_samples = 0;
  // Loss elements (positions counted in the loss x width) of these samples.
  std::function<int64_t(const std::vector<int64_t>& samples)> elements;
  // Runs `samples` through the block with linear weights `w`; returns the sum of squared errors
  // over the loss positions and adds scale * dL/dW (L the plain sum) into dw[i] where non-null.
  std::function<double(const std::vector<int64_t>& samples, const PerLinear<const float*>& w,
                       float scale, const PerLinear<float*>& dw)>
      step;
  int n_linears() const { return static_cast<int>(w.size()); }
};

// The SignSGD loop of tune_block below (its steps 1-4 and the best snapshot) on any block:
// returns the tuned weights, initial_loss (iteration 0, RTN), best_loss and best_iter; with
// iters 0 the RTN weights and zero losses (the caller measures them). `unrouted` is left empty.
Result<TuneResult> signsgd_tune(const TunableBlock& block,
                                const PerLinear<formats::QuantScheme>& schemes,
                                const TuneOptions& options, ThreadPool& pool,
                                const TuneProgress& progress = {});

// Tunes `block` (owned f32 copy, see copy_block) on `calib`. schemes[i] says how linear i is
// quantized: layout kDense leaves it in full precision; otherwise bits in [2, 8], group_size -1
// (per channel) or > 0, sym (full-range symmetric) or asym. Per iteration t (§1.4):
//   1. quantize-dequantize every tuned weight with the current V, alpha, beta (f16 scales);
//   2. for each of gradient_accumulate_steps mini-batches of batch_size samples (drawn without
//      replacement from a seeded shuffle, reshuffled when fewer than a batch remain, like the
//      tool's IndexSampler), run the block and sum the squared error over the loss positions;
//      loss = sum / (loss positions x hidden) over the global batch;
//   3. if loss is the lowest so far (iteration 0 = RTN included) snapshot V, alpha, beta;
//   4. SignSGD: theta -= lr_t sign(dL/dtheta), lr_t = lr (1 - t / iters), then clip V to
//      [-0.5, 0.5] and alpha, beta to [0.5, 1] (the paper's bounds, §1.1).
// The best snapshot is exported. Errors name the bad argument.
Result<TuneResult> tune_block(const BlockTensors<float>& block,
                              const PerLinear<formats::QuantScheme>& schemes,
                              const BlockCalibration& calib, const TuneOptions& options,
                              ThreadPool& pool, const TuneProgress& progress = {});

// The same on a loaded layer: copy_block(layer, config, layer_index), then the above.
Result<TuneResult> tune_block(const models::DecoderLayerWeights& layer,
                              const models::ModelConfig& config, int64_t layer_index,
                              const PerLinear<formats::QuantScheme>& schemes,
                              const BlockCalibration& calib, const TuneOptions& options,
                              ThreadPool& pool, const TuneProgress& progress = {});

// The block's output on `inputs` with linear i replaced by dequantize(*weights[i]) (nullptr:
// the full-precision weight): out [n_samples, seqlen, hidden]. The pipeline feeds this to the
// next block as its quantized-chain input (§1.4 item 3).
Status block_output(const BlockTensors<float>& block,
                    const PerLinear<const formats::QuantizedWeight*>& weights,
                    const BlockCalibration& calib, float* out, ThreadPool& pool);

// The tuning loss (mean squared error over the loss mask's positions) of the whole calibration set
// with the given weights, as block_output.
Result<double> block_loss(const BlockTensors<float>& block,
                          const PerLinear<const formats::QuantizedWeight*>& weights,
                          const BlockCalibration& calib, ThreadPool& pool);

// The same loss of an output already computed: y [n_samples, seqlen, hidden] against
// calib.targets over the loss mask's positions.
double output_loss(const float* y, const BlockCalibration& calib, int64_t hidden);

}  // namespace qs::quant
