// models: the KV-cache scales a checkpoint may carry for an fp8 cache (vLLM's names, §2.6 of
// the serving notes): per layer `self_attn.k_scale` / `v_scale`, else the compressed-tensors
// and AutoFP8 `self_attn.k_proj.output_scale` / `v_proj.output_scale`, else a legacy
// `self_attn.kv_scale` for both. A missing scale is 1.0, as in vLLM.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/checkpoint.h"

namespace qs::models {

struct KvCacheScales {
  std::vector<float> k, v;        // [n_layers] each; 1.0 where the checkpoint has none
  int64_t n_from_checkpoint = 0;  // layers whose scales came from the file
};

// Reads the scales of `n_layers` layers; the tensors it reads are added to `consumed`. A scale
// must be a float tensor of one element, or one per kv head (the per-head scales of
// llm-compressor's attn_head strategy; their max is used, which never clips a head), and be
// positive and finite; anything else is an error naming the tensor.
Result<KvCacheScales> read_kv_cache_scales(const io::Checkpoint& ckpt, int64_t n_layers,
                                           int64_t n_kv_heads, std::set<std::string>* consumed);

}  // namespace qs::models
