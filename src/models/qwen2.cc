// models: the Qwen2 family (Qwen2ForCausalLM): Llama blocks with a bias on q/k/v_proj (not on
// o_proj), and sliding windows only on the layers that `use_sliding_window` /
// `max_window_layers` / `layer_types` pick.
#include "models/families.h"

namespace qs::models {

Status parse_qwen2_family(const nlohmann::json& config, ModelConfig* out) {
  out->qkv_bias = true;
  return parse_qwen_sliding_window(config, out);
}

}  // namespace qs::models
