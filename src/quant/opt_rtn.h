// quant: OPT-RTN, AutoRound's default for `--iters 0` (autoround.md §1.5): round-to-nearest
// with, per group, the full-range symmetric scale chosen from a grid to minimise the
// imatrix-weighted reconstruction error sum_j imatrix[j] (s q_j - w_j)^2. Asymmetric schemes
// use plain min-max RTN, as the tool does.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/quantized_weight.h"
#include "quant/block_tuner.h"

namespace qs::quant {

// w [n, k] row-major f32; imatrix [k]: per input channel, the sum over calibration tokens of
// x^2 divided by the sample count (nullptr weights every channel equally). bits in [2, 8],
// group_size -1 (per channel) or > 0 (QS_CHECKed: callers validate user input).
// Sym: per group, with gmax the signed value of largest magnitude, the candidates are
// iscale = -(2^(b-1) - step * i) / gmax for i in [-imax, imax] (step 0.06, imax 100; for 2 bits
// step 0.01, imax 90); each candidate's scale is rounded to f16 and floored like RTN's, the
// codes are round(w / s) clamped to [-2^(b-1), 2^(b-1) - 1], and the lowest weighted error
// wins. i = 0 is exactly RTN's scale, so the result is never worse than RTN on that error.
// Rows are split over `pool` (nullptr: the calling thread); the result is the same either way.
formats::QuantizedWeight opt_rtn(const float* w, int64_t n, int64_t k, int bits, int64_t group_size,
                                 bool sym, const float* imatrix, ThreadPool* pool = nullptr);

// The imatrix's accumulation (§1.5): adds, per input channel, the sum over the real tokens
// (mask[t] != 0; nullptr = all) of x[tokens, d] squared into sums[d]. imatrix_of divides the
// sums by the sample count. Columns are split over `pool` (nullptr: the calling thread); the
// result is the same either way.
void add_squares(const float* x, int64_t tokens, int64_t d, const uint8_t* mask, double* sums,
                 ThreadPool* pool = nullptr);
std::vector<float> imatrix_of(const std::vector<double>& sums, int64_t n_samples);

// The imatrix of each of the block's linears (§1.5): per input channel, the sum over the real
// tokens (calib.mask) of the linear's input squared, divided by n_samples. Runs the block with
// its full-precision weights on calib.inputs (targets unused). [in_features] per linear. That
// forward's output, [n_samples, seqlen, hidden], goes to `y_out` unless it is nullptr: the
// reference the quantized block's output is measured against, at no extra cost. An MoE expert
// sees only the tokens routed to it; one no token reached gets an empty imatrix. `scratch`, when
// given, holds the forward's saved activations and is reused from call to call: at 8 x 2048
// tokens they are about half a GiB, which glibc maps fresh and the kernel zeroes page by page
// on every call otherwise (a tenth of the CPU time of a 128 x 2048 run, in page faults).
Result<PerLinear<std::vector<float>>> block_imatrix(const BlockTensors<float>& block,
                                                    const BlockCalibration& calib, ThreadPool& pool,
                                                    float* y_out = nullptr,
                                                    BlockActivations<float>* scratch = nullptr);

}  // namespace qs::quant
