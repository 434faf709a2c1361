// formats: the formats table. One entry per stored layout (quant_scheme.h): which tensors a
// quantized linear `P` holds, and the reference unpack (stored tensors -> QuantizedWeight) and
// pack (QuantizedWeight -> stored tensors) that both the loader and the exporter use. Adding a
// layout means one entry here plus its own file; the table-driven tests then cover it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"

namespace qs::formats {

// The tensors of one linear module by suffix ("qweight", "scales", "weight_scale", "bias" is
// not among them: biases stay with the model).
using StoredTensors = std::map<std::string, Tensor>;

// One tensor a layout expects for a linear of [n, k] under a scheme.
struct TensorExpect {
  std::string suffix;          // "qweight"
  std::vector<DType> dtypes;   // any of these
  std::vector<int64_t> shape;  // exact; empty vector with scalar_ok = a 0-d or [1] tensor
  bool required = true;
  bool scalar_ok = false;  // shape [] and [1] both accepted (per-tensor scales)
  std::string why;         // what implies the shape, for messages: "bits=4 and k=896 imply"
};

struct LayoutDef {
  Layout layout;
  // Whether this layout can hold W[n, k] under `scheme` at all (bits it stores, group sizes,
  // packed widths that must be whole int32 words); the error names the limit. check_stored and
  // pack call it first, so expected/unpack/pack may assume it.
  Status (*supports)(const QuantScheme& scheme, int64_t n, int64_t k);
  // The tensors `P.<suffix>` of this layout for W[n, k]; `scheme.group_size`, `bits`, `sym`
  // decide the shapes (groups = ceil(k / group)).
  std::vector<TensorExpect> (*expected)(const QuantScheme& scheme, int64_t n, int64_t k);
  // Decodes the stored tensors (already checked against expected()) into `out`.
  Status (*unpack)(const QuantScheme& scheme, const StoredTensors& stored, int64_t n, int64_t k,
                   QuantizedWeight* out);
  // Encodes `w` in this layout: owning tensors named by suffix. The inverse of unpack for every
  // weight the layout can represent; an error names what it cannot (e.g. awq with 3 bits, a
  // zero of 0 under GPTQ v1's zero-1, a scale not exact in w.scale_dtype). A g_idx is written
  // where the layout has one and `w` carries one (or the scheme is act-order).
  Result<StoredTensors> (*pack)(const QuantScheme& scheme, const QuantizedWeight& w);
};

// The entry of `layout` (kDense has none: QS_CHECK).
const LayoutDef& layout_def(Layout layout);

// Checks `stored` against layout_def(scheme.layout).expected(scheme, n, k): every required
// tensor present, dtype and shape right. The error names the module `prefix`, the tensor, the
// expected and the found shape/dtype, and what in the scheme implied it (e.g. "bits=4 and
// k=896 imply qweight [112, 4864]").
Status check_stored(const std::string& prefix, const QuantScheme& scheme,
                    const StoredTensors& stored, int64_t n, int64_t k);

// check_stored + unpack + QuantizedWeight::validate.
Result<QuantizedWeight> unpack(const std::string& prefix, const QuantScheme& scheme,
                               const StoredTensors& stored, int64_t n, int64_t k);

}  // namespace qs::formats
