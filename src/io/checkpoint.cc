// io: Checkpoint (one model.safetensors or the shards of model.safetensors.index.json). A tensor is
// reachable under exactly one name from exactly one file: an index that points at a missing shard
// or tensor, or two files holding the same name, are errors rather than a silent choice.
#include <cstdio>
#include <filesystem>
#include <set>

#include "io/checkpoint.h"

#include "core/json.h"

namespace qs::io {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Shard names come from a file we did not write; keep them inside the checkpoint directory.
bool is_safe_relative(const std::string& name) {
  const fs::path p(name);
  if (name.empty() || p.is_absolute()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& dir) {
  return open(dir, "model");
}

std::string Checkpoint::base_name(const std::string& dir) {
  const std::string diffusers = "diffusion_pytorch_model";
  std::error_code ec;
  const bool is_diffusers = fs::exists(fs::path(dir) / (diffusers + ".safetensors"), ec) ||
                            fs::exists(fs::path(dir) / (diffusers + ".safetensors.index.json"), ec);
  return is_diffusers ? diffusers : "model";
}

Result<Checkpoint> Checkpoint::open(const std::string& dir, const std::string& base) {
  const std::string single_file = base + ".safetensors";
  const std::string index_file = single_file + ".index.json";
  Checkpoint ckpt;
  ckpt.dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found(dir + ": not a directory");

  // Shard base name -> tensor names the index assigns to it (empty for a single file).
  std::map<std::string, std::set<std::string>> shards;
  const fs::path index_path = fs::path(dir) / index_file;
  if (fs::exists(index_path, ec)) {
    QS_ASSIGN_OR_RETURN(json index, read_json(index_path.string()));
    auto map_it = index.is_object() ? index.find("weight_map") : index.end();
    if (map_it == index.end() || !map_it->is_object()) {
      return data_loss(index_path.string() + ": missing 'weight_map' object");
    }
    for (const auto& [name, shard] : map_it->items()) {
      if (!shard.is_string() || !is_safe_relative(shard.get<std::string>())) {
        return data_loss(index_path.string() + ": weight_map entry for tensor '" + name +
                         "' must be a file name inside the checkpoint, found " + shard.dump());
      }
      shards[shard.get<std::string>()].insert(name);
    }
    if (shards.empty()) return data_loss(index_path.string() + ": 'weight_map' is empty");
  } else if (fs::exists(fs::path(dir) / single_file, ec)) {
    shards[single_file];
  } else {
    return not_found(dir + ": neither " + single_file + " nor " + index_file + " found");
  }

  bool first = true;
  for (const auto& [shard, listed] : shards) {
    const std::string path = (fs::path(dir) / shard).string();
    if (!listed.empty() && !fs::exists(path, ec)) {
      return not_found(index_path.string() + " names shard " + shard + " (for tensor '" +
                       *listed.begin() + "'), but " + path + " does not exist");
    }
    QS_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
    std::vector<std::pair<std::string, Tensor>> tensors;
    QS_RETURN_IF_ERROR(read_safetensors(file, &tensors, first ? &ckpt.metadata_ : nullptr));
    first = false;
    std::set<std::string> present;
    for (auto& [name, tensor] : tensors) {
      auto [it, inserted] = ckpt.tensors_.emplace(name, Entry{std::move(tensor), shard});
      if (!inserted) {
        return data_loss(dir + ": tensor '" + name + "' is stored in both " + it->second.file +
                         " and " + shard);
      }
      present.insert(name);
    }
    for (const auto& name : listed) {
      if (present.count(name) == 0) {
        return data_loss(index_path.string() + " places tensor '" + name + "' in " + shard +
                         ", but " + path + " does not contain it");
      }
    }
  }
  return ckpt;
}

Result<Checkpoint> Checkpoint::rooted(const std::string& prefix) const {
  Checkpoint view;
  view.dir_ = dir_;
  view.root_ = root_ + prefix;
  view.metadata_ = metadata_;
  // The names are sorted, so those under the prefix are one run.
  for (auto it = tensors_.lower_bound(prefix);
       it != tensors_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    view.tensors_.emplace_hint(view.tensors_.end(), it->first.substr(prefix.size()), it->second);
  }
  if (view.tensors_.empty()) {
    return not_found(dir_ + ": no tensor is stored under '" + view.root_ + "'");
  }
  return view;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) out.push_back(name);
  return out;
}

Result<Tensor> Checkpoint::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return not_found(dir_ + ": tensor '" + root_ + name + "' not found");
  return it->second.tensor;
}

Result<Tensor> Checkpoint::get(const std::string& name,
                               const std::vector<int64_t>& expected) const {
  QS_ASSIGN_OR_RETURN(Tensor t, get(name));
  if (t.shape != expected) {
    return invalid_argument((fs::path(dir_) / file_of(name)).string() + ": tensor '" + root_ +
                            name + "' has shape " + shape_string(t.shape) + ", expected " +
                            shape_string(expected));
  }
  return t;
}

std::string Checkpoint::file_of(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? "" : it->second.file;
}

Status write_checkpoint(const std::string& dir,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        uint64_t max_shard_bytes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found(dir + ": not a directory");
  if (max_shard_bytes == 0) return invalid_argument("max_shard_bytes must be positive");
  // Check what write_safetensors would refuse, across shards, before touching the directory.
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || !seen.insert(name).second) {
      return invalid_argument(dir + ": tensor name '" + name + "' is reserved or given twice");
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return invalid_argument(dir + ": tensor '" + name + "' has negative shape " +
                                shape_string(t.shape));
      }
    }
    if (t.data == nullptr && t.nbytes() > 0) {
      return invalid_argument(dir + ": tensor '" + name + "' has no data");
    }
  }
  // Group tensors into shards in order, starting a new shard when the next tensor would push
  // the current one past the limit.
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& named : tensors) {
    const uint64_t n = named.second.nbytes();
    if (!shards.back().empty() && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(named);
    shard_bytes += n;
    total_bytes += n;
  }
  std::vector<std::string> names;
  if (shards.size() == 1) {
    names.push_back(kSingleFile);
  } else {
    for (size_t i = 0; i < shards.size(); ++i) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      names.push_back(buf);
    }
  }

  // Remove what a previous save left: the other layout's files and shards of another count.
  const std::set<std::string> keep(names.begin(), names.end());
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours = name == kSingleFile || name == kIndexFile ||
                      (name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos &&
                       name.size() > 12 && name.substr(name.size() - 12) == ".safetensors");
    if (ours && keep.count(name) == 0) fs::remove(entry.path(), ec);
  }

  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string path = (fs::path(dir) / names[i]).string();
    QS_RETURN_IF_ERROR(write_safetensors(path, shards[i], metadata));
    for (const auto& [name, t] : shards[i]) weight_map[name] = names[i];
  }
  if (shards.size() == 1) return ok_status();
  return write_json((fs::path(dir) / kIndexFile).string(),
                    {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}});
}

}  // namespace qs::io
