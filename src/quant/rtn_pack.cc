// quant: RTN + pack + unpack check (see rtn_pack.h).
#include "quant/rtn_pack.h"

#include "formats/layouts.h"
#include "formats/rtn.h"

namespace qs::quant {

Status rtn_quantize_and_pack(const std::string& module, const formats::QuantScheme& scheme,
                             io::ExportFormat format, const std::vector<float>& values, int64_t n,
                             int64_t k, std::vector<std::pair<std::string, Tensor>>* out) {
  if (scheme.layout == formats::Layout::kFp8) {
    return pack_quantized(module, scheme, format,
                          formats::fp8_quantize(values.data(), n, k, scheme.block_k), out);
  }
  return pack_quantized(
      module, scheme, format,
      formats::rtn_quantize(values.data(), n, k, scheme.bits, scheme.group_size, scheme.sym), out);
}

Status pack_quantized(const std::string& module, const formats::QuantScheme& scheme,
                      io::ExportFormat format, formats::QuantizedWeight w,
                      std::vector<std::pair<std::string, Tensor>>* out) {
  const int64_t n = w.n, k = w.k;
  if (format == io::ExportFormat::kAutoGptq) {
    w.g_idx.resize(k);
    for (int64_t c = 0; c < k; ++c) w.g_idx[c] = static_cast<int32_t>(c / w.group_size);
  }
  Result<formats::StoredTensors> packed = formats::layout_def(scheme.layout).pack(scheme, w);
  if (!packed.ok()) {
    return packed.status().with_context(module + " [" + std::to_string(n) + ", " +
                                        std::to_string(k) + "] as " + scheme.describe());
  }
  formats::StoredTensors stored = std::move(*packed);
  QS_ASSIGN_OR_RETURN(formats::QuantizedWeight back, formats::unpack(module, scheme, stored, n, k));
  if (back.codes != w.codes || back.zeros != w.zeros || back.scales != w.scales) {
    return invalid_argument(
        module + ": " + io::export_format_name(format) + " (" + scheme.describe() +
        ") cannot store this layer's quantized weight exactly (e.g. a zero point "
        "of 0 under GPTQ v1's zero-1); choose another --format");
  }
  for (auto& [suffix, tensor] : stored) out->emplace_back(module + "." + suffix, std::move(tensor));
  return ok_status();
}

}  // namespace qs::quant
