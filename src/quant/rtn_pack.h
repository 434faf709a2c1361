// quant: one linear RTN-quantized (formats/rtn.h) and packed into the stored tensors of its
// checkpoint layout, checked by unpacking: a layout that cannot hold the result exactly (GPTQ
// v1 has no zero point 0) is an error, never a silently different checkpoint. Used by the
// quantize pipeline and by `make-model --quantize`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "io/quant_export.h"

namespace qs::quant {

// Appends "<module>.<suffix>" tensors (qweight, qzeros, scales, g_idx, ...) of `values`
// [n, k] (row-major f32) quantized under `scheme` (as the written quantization_config reads
// back) to `out`. auto_gptq exports also get the trivial g_idx (autoround.md §3.2).
Status rtn_quantize_and_pack(const std::string& module, const formats::QuantScheme& scheme,
                             io::ExportFormat format, const std::vector<float>& values, int64_t n,
                             int64_t k, std::vector<std::pair<std::string, Tensor>>* out);

// The same for an already quantized linear (AutoRound's tuned or OPT-RTN's weight, whose
// bits, group size and symmetry are `scheme`'s): packed, unpacked and compared code for code.
Status pack_quantized(const std::string& module, const formats::QuantScheme& scheme,
                      io::ExportFormat format, formats::QuantizedWeight w,
                      std::vector<std::pair<std::string, Tensor>>* out);

}  // namespace qs::quant
