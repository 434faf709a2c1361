// io: checkpoints named as users type them. A local directory is taken as it is; a Hugging Face
// repo id ("Qwen/Qwen2.5-0.5B-Instruct") is looked up offline in the hub cache that
// huggingface_hub (and so transformers and vLLM) download into, in its own layout:
//   <cache>/models--Qwen--Qwen2.5-0.5B-Instruct/refs/main        the commit a branch points to
//   <cache>/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/<commit>/config.json, ...
// Nothing is downloaded: a repo that is not in the cache is an error saying where it looked.
#pragma once

#include <string>

#include "core/status.h"

namespace qs::io {

// The hub cache directory, found as huggingface_hub finds it: $HF_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else $HOME/.cache/huggingface/hub.
std::string hf_hub_cache_dir();

// Whether `name` has the shape of a hub repo id: "owner/name", each part of letters, digits,
// '-', '_' and '.', not starting with '.' (huggingface_hub's validate_repo_id).
bool looks_like_repo_id(const std::string& name);

// The directory to load for `name`: `name` itself when it exists as a directory; else, for a
// repo id, its snapshot in the hub cache at `revision` (a branch or tag through refs/, or a
// commit hash; empty = "main"). Errors name the model and every place looked.
Result<std::string> resolve_model_dir(const std::string& name, const std::string& revision = "");

}  // namespace qs::io
