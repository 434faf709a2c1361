// ops: QuantMatrix, a quantized linear weight made resident (see quant_matrix.h).
#include "ops/quant_matrix.h"

#include "kernels/cpu/isa.h"

namespace qs::ops {

std::string QuantMatrix::kernel() const {
  if (!packed()) return "dequantized bf16: " + reason_;
  const std::string group = view_.n_groups == 1 ? std::string("per-channel")
                                                : "g" + std::to_string(view_.group_size);
  const kernels::Isa isa = kernels::active_isa();
  const std::string isa_name = isa == kernels::Isa::kAvx512 ? std::string("avx512-vnni")
                                                            : std::string(kernels::isa_name(isa));
  return "int" + std::to_string(view_.bits) + " " + group + " (" + isa_name + ")";
}

size_t QuantMatrix::resident_bytes() const {
  return packed() ? storage_bytes_ : fallback_.nbytes();
}

}  // namespace qs::ops
