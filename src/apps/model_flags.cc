// apps: shared model-loading flags.
#include "apps/model_flags.h"

#include "engine/kv_cache.h"
#include "io/hf_cache.h"
#include "ops/backend.h"

namespace qs::apps {

void add_model_flags(Flags& flags) {
  flags.add("quantization",
            "quantization method the checkpoint must use (auto-round, gptq, awq, "
            "compressed-tensors, fp8 or an alias); default: detect from quantization_config");
  flags.add("lm-head-dtype",
            "auto (lm_head as stored) or int8: a 16-bit lm_head is made int8 per row at load, "
            "as llama.cpp stores a tied output matrix (half the bytes per decode step); a "
            "quantized one is left as it is",
            false, "auto");
  flags.add("device",
            "where the model runs: auto (the first GPU where this build has the CUDA backend and "
            "the machine a GPU, else the CPU), cpu, cuda or cuda:N",
            false, "auto");
  add_revision_flag(flags);
}

void add_revision_flag(Flags& flags) {
  flags.add("revision",
            "for a Hugging Face repo id (e.g. Qwen/Qwen2.5-0.5B-Instruct, looked up offline in "
            "$HF_HUB_CACHE or ~/.cache/huggingface/hub): the branch, tag or commit (default main)");
}

Result<std::string> resolve_model_flag(const Flags& flags, const std::string& name) {
  return io::resolve_model_dir(name, flags.get("revision"));
}

Result<models::LoadOptions> load_options_from_flags(const Flags& flags) {
  models::LoadOptions options;
  options.quantization = flags.get("quantization");
  options.lm_head_dtype = flags.get("lm-head-dtype");
  auto device = ops::resolve_device(flags.get("device"));
  if (!device.ok()) return device.status().with_context("--device");
  options.device = *device;
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
