// quant: a decoder layer of a loaded model run on calibration activations through the
// inference forward itself (models::decoder_layer), and OPT-RTN of a layer on top of it. This
// is how the tuned modes quantize the layers quant/block.h cannot express (Mixture-of-Experts
// ones): the layer's definition is the one that serves, and what OPT-RTN needs of it (each
// linear's input statistics, an MoE expert's over the tokens routed to it) is observed as it
// runs (models::LinearInputObserver). AutoRound's gradients still need quant/block.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "models/blocks.h"
#include "models/model.h"

namespace qs::quant {

// y [n_samples, seqlen, hidden] = layer(x), each sample a sequence at positions 0..seqlen-1,
// through `weights`: one of model's layers or its quantized twin. Samples run a few
// at a time through one paged KV cache. `observer` (may be null) sees every linear's input.
Status layer_forward(const models::Model& model, const models::DecoderLayerWeights& weights,
                     const float* x, int64_t n_samples, int64_t seqlen, float* y,
                     models::LinearInputObserver* observer, ThreadPool& pool);

struct LayerOptRtn {
  // Module name -> its weight, for every linear of the layer whose scheme is quantized.
  std::map<std::string, formats::QuantizedWeight> weights;
  // Experts no calibration token was routed to: plain RTN (no imatrix to weight their search).
  std::vector<std::string> unrouted;
};

// OPT-RTN of layer `index` (autoround.md §1.5) on the quantized chain's inputs x_q: the layer
// runs once with its full-precision weights, collecting each linear's imatrix and writing its
// output to `reference`, then each planned linear gets the imatrix-weighted scale search
// (8-bit ones plain RTN, as the tool does), and the layer runs again with the quantized
// weights (dequantized to f32) on x_q, writing `y_q`: the next layer's input. `schemes` maps
// module names to their planned scheme (absent or dense: kept).
Result<LayerOptRtn> opt_rtn_layer(const models::Model& model, int64_t index,
                                  const std::map<std::string, formats::QuantScheme>& schemes,
                                  const float* x_q, int64_t n_samples, int64_t seqlen,
                                  float* reference, float* y_q, ThreadPool& pool);

}  // namespace qs::quant
