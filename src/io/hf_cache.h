// io: checkpoints named as users type them. A local path is taken as it is; a Hugging Face
// repo id ("Qwen/Qwen2.5-0.5B-Instruct") is looked up offline in the hub cache that
// huggingface_hub (and so transformers and vLLM) download into, in its own layout:
//   <cache>/models--Qwen--Qwen2.5-0.5B-Instruct/refs/main        the commit a branch points to
//   <cache>/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/<commit>/config.json, ...
//   <cache>/models--Qwen--Qwen2.5-0.5B-Instruct/blobs/<etag>     what the snapshot links to
// Nothing is downloaded: a repo that is not in the cache is an error saying where it looked.
// The snapshot's files are symlinks into blobs/; everything that reads a checkpoint opens
// files by path (open/stat follow links), so the snapshot loads like any directory.
#pragma once

#include <string>

#include "core/status.h"

namespace qs::io {

// The hub cache directory, found as huggingface_hub 1.x finds it (constants.py): $HF_HUB_CACHE,
// else the legacy $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. A leading "~" is the home
// directory, as os.path.expanduser makes it. An empty variable counts as unset.
std::string hf_hub_cache_dir();

// Whether `name` has the shape of a model repo id "owner/name", by huggingface_hub's
// validate_repo_id: each part of letters, digits, '-', '_' and '.', starting and ending with a
// letter, digit or '_', the name at most 96 characters; no "--" or ".." anywhere (the cache
// folder joins the parts with "--"), no ".git" at the end.
bool looks_like_repo_id(const std::string& name);

// The path to load for the model named `name`: `name` itself when it exists locally (a
// directory, or a file for a caller that takes files), else, for a repo id, its snapshot
// directory in the hub cache at `revision` (a branch or tag through refs/, else a 40-hex commit
// hash naming the snapshot directly; empty = "main"). Errors name the model, every place looked
// (the local path, the repo folder, the ref file) and how to fetch the repo.
Result<std::string> resolve_model_path(const std::string& name, const std::string& revision = "");

// resolve_model_path for callers that load a checkpoint directory (every command that takes
// --model): a local path that exists but is not a directory is an error saying so.
Result<std::string> resolve_model_dir(const std::string& name, const std::string& revision = "");

}  // namespace qs::io
