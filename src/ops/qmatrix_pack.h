// ops: repacks a checkpoint's quantized weight (formats::QuantizedWeight) into the resident
// layout of kernels/qmatrix.h, once at load. The translation from formats/ types to the
// kernels' plain views lives in ops so that kernels/ never sees a formats type.
#pragma once

#include <cstddef>
#include <string>

#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "kernels/qmatrix.h"

namespace qs::ops {

// Why the packed kernels cannot run `w` ("" when they can): more than 8 bits, a group size
// that is not a multiple of 32, act-order groups of unequal sizes. (fp8 codes pack; the int8
// kernels do not run them, the bf16-activation ones do.)
std::string qmatrix_unsupported(const formats::QuantizedWeight& w);
// Bytes qmatrix_pack writes for `w` (codes, scales, zero terms, perm; each 64-byte aligned).
size_t qmatrix_bytes(const formats::QuantizedWeight& w);
// Repacks `w` (qmatrix_unsupported(w) empty) into `buf` (qmatrix_bytes(w) bytes, 64-byte
// aligned) and returns the view of it.
kernels::QMatrixView qmatrix_pack(const formats::QuantizedWeight& w, void* buf);

// The kernels' view of a declared activation scheme (one that is quantized()).
kernels::ActQuant act_quant_of(const formats::ActScheme& act);

}  // namespace qs::ops
