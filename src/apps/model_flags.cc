// apps: shared model-loading flags.
#include "apps/model_flags.h"

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

}  // namespace qs::apps
