// fuzz: each stored quantized layout's checks. The input is a quantization_config (which picks
// and validates the scheme), a line "n k" (the linear's shape), then a .safetensors file whose
// tensors are the module's stored tensors by suffix (qweight, qzeros, scales, g_idx, weight,
// weight_scale, ...). What formats::unpack accepts must dequantize without reading out of
// bounds, whatever the codes, zeros, scales and g_idx hold.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/mmap_file.h"
#include "formats/layouts.h"
#include "fuzz_util.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  const auto parts = qs::fuzz::split(data, size, 3);
  const auto qc_json = nlohmann::json::parse(parts[0], nullptr, false);
  if (qc_json.is_discarded()) return 0;
  auto qc = qs::io::parse_quant_config(qc_json, "config.json");
  if (!qc.ok()) return 0;
  const qs::formats::QuantScheme scheme = qc->scheme_for("model.layers.0.mlp.down_proj");
  if (!scheme.quantized()) return 0;
  long long n = 0, k = 0;
  if (std::sscanf(parts[1].c_str(), "%lld %lld", &n, &k) != 2) return 0;
  // The loader takes n and k from config.json, already bounded; keep the dequantized copy
  // small so the fuzzer spends its time on the checks.
  if (n <= 0 || k <= 0 || n > 4096 || k > 4096 || n * k > (1 << 20)) return 0;
  auto file = qs::MappedFile::open(scratch.write("layer.safetensors", parts[2]));
  if (!file.ok()) return 0;
  std::vector<std::pair<std::string, qs::Tensor>> tensors;
  if (!qs::io::read_safetensors(*file, &tensors, nullptr).ok()) return 0;
  qs::formats::StoredTensors stored(tensors.begin(), tensors.end());
  auto w = qs::formats::unpack("model.layers.0.mlp.down_proj", scheme, stored, n, k);
  if (!w.ok()) return 0;
  std::vector<float> out(static_cast<size_t>(n * k));
  qs::formats::dequantize(*w, out.data());
  return 0;
}
