// io: a Hugging Face checkpoint directory's tensors. Opens `model.safetensors`, or every
// shard named by `model.safetensors.index.json`, by mmap; tensors are zero-copy views whose
// owner keeps the mapping alive. Every failure names the file and the tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace qs::io {

// transformers' save_pretrained default max_shard_size ("5GB", decimal).
constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000ull;

class Checkpoint {
 public:
  // `dir` holds model.safetensors or model.safetensors.index.json (+ shards); the index wins
  // when both exist, as in transformers. Every shard the index names must exist and hold the
  // tensors the index places in it; a name stored in two shards is an error. Tensors a shard
  // holds beyond its index entries are kept (transformers loads them too).
  static Result<Checkpoint> open(const std::string& dir);
  // The same for files named `base`.safetensors / `base`.safetensors.index.json (diffusers
  // names a component's weights diffusion_pytorch_model).
  static Result<Checkpoint> open(const std::string& dir, const std::string& base);
  // The base name of the weights in `dir`: "diffusion_pytorch_model" when diffusers' files are
  // there, else "model".
  static std::string base_name(const std::string& dir);

  // The tensors stored under `prefix` ("thinker."), named without it: the view a model kept
  // inside a larger checkpoint (a full Qwen2.5-Omni's thinker, beside its talker and
  // token2wav) is read through, so that every reader asks for the names it always uses
  // ("model.layers.0.self_attn.q_proj.weight"). Tensors stay views of the same mapping;
  // file_of() and every message still name the tensor as stored. An error when no tensor
  // has the prefix.
  Result<Checkpoint> rooted(const std::string& prefix) const;
  // The prefix this view strips ("" for a whole checkpoint).
  const std::string& root() const { return root_; }

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  std::vector<std::string> names() const;  // sorted
  // Error: "<dir>: tensor 'x' not found".
  Result<Tensor> get(const std::string& name) const;
  // As get(), and the shape must equal `expected`. Error names the file, the tensor, and the
  // expected and found shapes.
  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& expected) const;
  // The shard file (base name) that holds `name`, or "" if none does.
  std::string file_of(const std::string& name) const;
  // safetensors "__metadata__" of the first file.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    Tensor tensor;
    std::string file;
  };
  std::string dir_;
  std::string root_;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Parses one .safetensors file into (name -> tensor) views of `file`. Validates the header
// against the file: offsets in bounds, non-overlapping, sized dtype x shape, known dtypes, no
// duplicate names. Gaps between tensors are accepted. A tensor whose bytes are not aligned to
// its element size is copied into an aligned buffer instead of viewed. `metadata` may be null.
Status read_safetensors(const std::shared_ptr<MappedFile>& file,
                        std::vector<std::pair<std::string, Tensor>>* tensors,
                        std::map<std::string, std::string>* metadata);

// Writes tensors (in the given order, contiguous, header space-padded to 8 bytes as upstream
// does) as one .safetensors file, via a temporary file renamed into place.
Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// Writes `tensors` into the directory `dir` (which must exist) the way transformers'
// save_pretrained lays them out: one model.safetensors when they total at most
// `max_shard_bytes`, otherwise model-00001-of-0000N.safetensors shards filled in order (a
// tensor larger than the limit gets a shard of its own) plus model.safetensors.index.json
// {"metadata": {"total_size"}, "weight_map"}. Older checkpoint files of these names in `dir`
// are removed, so the directory never mixes two checkpoints.
Status write_checkpoint(const std::string& dir,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        // transformers checks "format"; older releases refuse files without it
                        const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
                        uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace qs::io
