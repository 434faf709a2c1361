// formats: round-to-nearest quantization as AutoRound does it with tuning off (autoround.md
// §1.3 with V = 0, alpha = beta = 1; data_type/int.py int_sym / int_asym). It produces the
// QuantizedWeight a checkpoint of that scheme would hold: `make-model --quantize` packs it
// into any layout, and the tests use it to make realistic weights.
#pragma once

#include <cstdint>

#include "formats/quantized_weight.h"

namespace qs::formats {

// Quantizes w[n, k] (row-major f32) with `bits` in [2, 8] per group of `group_size` input
// columns (-1 = whole row, 0 = whole tensor, its one scale and zero repeated on every row; the
// last group may be partial). Per group, with wmin = min(0, min w)
// and wmax = max(0, max w):
//   sym  (full range): the larger of |wmin|, wmax maps to -2^(b-1): scale = |wmin| / 2^(b-1)
//        when |wmin| > wmax, else -wmax / 2^(b-1) (negative); zero = 2^(b-1);
//   asym: scale = (wmax - wmin) / (2^b - 1), zero = round(-wmin / scale) in [0, 2^b - 1].
// Scales are rounded to f16 (AutoRound's scale_dtype) and kept at |scale| >= 1e-5 before the
// codes u = clamp(round(w / scale) + zero, 0, 2^b - 1) are computed (round half to even, as
// torch.round). QS_CHECKs its arguments: callers validate user input first.
QuantizedWeight rtn_quantize(const float* w, int64_t n, int64_t k, int bits, int64_t group_size,
                             bool sym);

// FP8 e4m3 quantization as llm-compressor's FP8 presets do it with a min-max observer: one
// scale per row (block 0) or per block x block tile, scale = amax / 448 (f32), codes =
// e4m3(w / scale) rounded to nearest even. Groups of the result: per row (k) or `block`.
QuantizedWeight fp8_quantize(const float* w, int64_t n, int64_t k, int64_t block);

}  // namespace qs::formats
