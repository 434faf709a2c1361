// apps: shared model-loading flags.
#include "apps/model_flags.h"

#include "engine/kv_cache.h"

namespace qs::apps {

void add_model_flags(Flags& flags) {
  flags.add("quantization",
            "quantization method the checkpoint must use (auto-round, gptq, awq, "
            "compressed-tensors, fp8 or an alias); default: detect from quantization_config");
}

models::LoadOptions load_options_from_flags(const Flags& flags) {
  models::LoadOptions options;
  options.quantization = flags.get("quantization");
  return options;
}

void add_kv_cache_dtype_flag(Flags& flags) {
  flags.add("kv-cache-dtype",
            "KV cache storage: auto (f32), bfloat16, fp8 (= fp8_e4m3) or fp8_e5m2; fp8 uses the "
            "checkpoint's k/v scales, 1.0 where it has none",
            false, "auto");
}

Result<DType> kv_cache_dtype_from_flags(const Flags& flags) {
  return engine::parse_kv_cache_dtype(flags.get("kv-cache-dtype"));
}

}  // namespace qs::apps
