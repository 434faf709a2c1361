// models: KV-cache scales from a checkpoint (see kv_scales.h).
#include "models/kv_scales.h"

#include <algorithm>
#include <cmath>

namespace qs::models {
namespace {

// The scale stored under `name`, or -1 when the checkpoint has none (vLLM's "unset" value).
Result<float> read_scale(const io::Checkpoint& ckpt, const std::string& name, int64_t n_kv_heads,
                         std::set<std::string>* consumed) {
  if (!ckpt.has(name)) return -1.0f;
  QS_ASSIGN_OR_RETURN(Tensor t, ckpt.get(name));
  const std::string where = ckpt.file_of(name) + ": KV-cache scale '" + name + "'";
  if (!dtype_is_float(t.dtype)) {
    return invalid_argument(where + " has dtype " + dtype_name(t.dtype) +
                            ", expected a float type");
  }
  if (t.numel() != 1 && t.numel() != n_kv_heads) {
    return invalid_argument(where + " has shape " + shape_string(t.shape) +
                            ", expected one element or one per kv head (" +
                            std::to_string(n_kv_heads) + ")");
  }
  float scale = 0.0f;
  for (float s : t.to_f32()) {
    if (!(s > 0.0f) || std::isinf(s)) {
      return invalid_argument(where + " holds " + std::to_string(s) +
                              ", expected positive and finite values");
    }
    scale = std::max(scale, s);
  }
  consumed->insert(name);
  return scale;
}

}  // namespace

Result<KvCacheScales> read_kv_cache_scales(const io::Checkpoint& ckpt, int64_t n_layers,
                                           int64_t n_kv_heads, std::set<std::string>* consumed) {
  KvCacheScales out;
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
    QS_ASSIGN_OR_RETURN(float k, read_scale(ckpt, p + "k_scale", n_kv_heads, consumed));
    QS_ASSIGN_OR_RETURN(float v, read_scale(ckpt, p + "v_scale", n_kv_heads, consumed));
    if (k < 0) {
      QS_ASSIGN_OR_RETURN(k, read_scale(ckpt, p + "k_proj.output_scale", n_kv_heads, consumed));
    }
    if (v < 0) {
      QS_ASSIGN_OR_RETURN(v, read_scale(ckpt, p + "v_proj.output_scale", n_kv_heads, consumed));
    }
    if (k < 0 && v < 0) {
      QS_ASSIGN_OR_RETURN(float kv, read_scale(ckpt, p + "kv_scale", n_kv_heads, consumed));
      k = v = kv;
    }
    // One of the two present: vLLM uses it for both.
    if (k < 0) k = v;
    if (v < 0) v = k;
    if (k > 0) ++out.n_from_checkpoint;
    out.k.push_back(k > 0 ? k : 1.0f);
    out.v.push_back(v > 0 ? v : 1.0f);
  }
  return out;
}

}  // namespace qs::models
