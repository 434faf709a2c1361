// ops: a quantized linear weight made resident. Built once at load from the formats layer's
// QuantizedWeight: repacked (kernels/qmatrix.h) when the packed kernels can run it (int codes
// on the int8-activation kernels, fp8 codes at one byte each on the bf16-activation ones),
// else dequantized to a dense bf16 weight for the dense kernels (the fallback: odd group
// sizes). It remembers the checkpoint's scheme, its declared activation quantization (W8A8:
// scheme().act and the static input scale) and the chosen kernel for `inspect`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "kernels/qmatrix.h"
#include "kernels/qpanels.h"

namespace qs::ops {

class QuantMatrix {
 public:
  // `scheme` is what the checkpoint declared (kept for reports); `w` its unpacked content.
  // A static activation scheme (scheme.act.dynamic false) takes the checkpoint's input_scale
  // and input_zero_point (0 when symmetric).
  static Result<std::shared_ptr<const QuantMatrix>> make(const formats::QuantScheme& scheme,
                                                         const formats::QuantizedWeight& w,
                                                         float input_scale = 1.0f,
                                                         int32_t input_zero = 0);

  int64_t rows() const { return n_; }  // n, output features
  int64_t cols() const { return k_; }  // k, input features
  const formats::QuantScheme& scheme() const { return scheme_; }
  // true: int kernels on view(); false: dense fallback().
  bool packed() const { return fallback_.empty(); }
  const kernels::QMatrixView& view() const { return view_; }
  // The codes as panels for the exact kernels (kernels/qpanels.h), or nullptr: made at load
  // when weight-only int4 codes will run with bf16 activations on a CPU with AVX512-BF16
  // (ActivationPrecision kBf16 at make(); QS_EXACT_PANELS=0 turns them off). Such a weight keeps
  // only the panels (view() keeps its shape, groups and act-order perm; codes, scales and zero
  // terms are null) and always runs the exact kernels.
  const kernels::QPanelsView* panels() const { return panels_storage_ ? &panels_ : nullptr; }
  const Tensor& fallback() const { return fallback_; }
  const formats::ActScheme& act() const { return scheme_.act; }
  // act() as the kernels take it (meaningful when act().quantized()).
  const kernels::ActQuant& act_quant() const { return act_quant_; }
  float input_scale() const { return input_scale_; }
  int32_t input_zero() const { return input_zero_; }
  // Whether calls run the bf16-activation kernels whatever ActivationPrecision says: fp8
  // codes, and declared activations the int8 kernels cannot reproduce (asymmetric int8, fp8).
  bool needs_bf16_kernels() const;
  // "int4 g128 (avx512-vnni)", "int8 per-channel (avx2)", "dequantized bf16: fp8 has no int
  // kernel" — what runs it on this CPU and why.
  std::string kernel() const;
  size_t resident_bytes() const;
  // What make() would hold for an [n, k] weight stored as `scheme`, computed without the
  // weight (inspect's estimates from a config alone). Uniform zero points when sym.
  static size_t resident_bytes_for(const formats::QuantScheme& scheme, int64_t n, int64_t k);

 private:
  int64_t n_ = 0, k_ = 0;
  formats::QuantScheme scheme_;
  kernels::QMatrixView view_;
  kernels::ActQuant act_quant_;
  std::shared_ptr<uint8_t[]> storage_;  // 64-byte aligned, holds what view_ points into
  size_t storage_bytes_ = 0;
  kernels::QPanelsView panels_;
  std::shared_ptr<uint8_t[]> panels_storage_;
  size_t panels_bytes_ = 0;
  Tensor fallback_;     // [n, k] bf16 when not packed
  std::string reason_;  // why not packed
  float input_scale_ = 1.0f;
  int32_t input_zero_ = 0;
};

}  // namespace qs::ops
