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

class Checkpoint {
 public:
  // `dir` holds model.safetensors or model.safetensors.index.json (+ shards).
  static Result<Checkpoint> open(const std::string& dir);

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
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Parses one .safetensors file into (name -> tensor) views of `file`. Validates the header
// against the file: offsets in bounds, ordered, non-overlapping, sized dtype x shape.
Status read_safetensors(const std::shared_ptr<MappedFile>& file,
                        std::vector<std::pair<std::string, Tensor>>* tensors,
                        std::map<std::string, std::string>* metadata);

// Writes tensors (in the given order) as one .safetensors file.
Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// Reads and parses a JSON file; a parse error names the file, line and column.
Result<nlohmann::json> read_json(const std::string& path);
Status write_json(const std::string& path, const nlohmann::json& value);

}  // namespace qs::io
