// fuzz: quantization_config detection: the input is a config.json (its quantization_config)
// or, after a separator line, a quantization_config.json / quantize_config.json beside it.
// Every scheme detection hands out, for any module name, must be one the formats table takes.
#include <cstdint>

#include "core/check.h"
#include "formats/layouts.h"
#include "fuzz_util.h"
#include "io/quant_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  scratch.reset();
  const auto parts = qs::fuzz::split(data, size, 3);
  const auto config = nlohmann::json::parse(parts[0], nullptr, false);
  if (config.is_discarded()) return 0;
  if (!parts[1].empty()) scratch.write("quantization_config.json", parts[1]);
  if (!parts[2].empty()) scratch.write("quantize_config.json", parts[2]);
  auto qc = qs::io::load_quant_config(scratch.dir(), config);
  if (!qc.ok()) return 0;
  (void)qc->summary();
  for (const char* module : {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj",
                             "model.layers.3.mlp.gate", "lm_head", "model.embed_tokens"}) {
    const qs::formats::QuantScheme s = qc->scheme_for(module);
    (void)s.describe();
    if (s.quantized()) (void)qs::formats::layout_def(s.layout);
  }
  return 0;
}
