// io: checkpoint summary for `quantserve inspect`.
#include "io/checkpoint_summary.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "io/checkpoint.h"

namespace qs::io {
namespace {

using nlohmann::json;

// The config.json keys worth showing, in display order. Unknown families still get their
// architecture, tensors and bytes; only these keys are echoed.
constexpr const char* kHyperParameterKeys[] = {
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "hidden_act",
    "tie_word_embeddings",
    "torch_dtype",
    "sliding_window",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "bos_token_id",
    "eos_token_id",
};

// 1040128 -> "1015.8 KiB"
std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// 260032 -> "260.03K", 6738415616 -> "6.74B"
std::string human_count(int64_t n) {
  const char* units[] = {"", "K", "M", "B", "T"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f%s" : "%.2f%s", v, units[u]);
  return buf;
}

void line(std::string* out, const std::string& key, const std::string& value) {
  std::string k = key + ":";
  if (k.size() < 26) k.resize(26, ' ');
  *out += k + " " + value + "\n";
}

}  // namespace

Result<CheckpointSummary> summarize_checkpoint(const std::string& dir) {
  CheckpointSummary s;
  s.dir = dir;
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return not_found(dir + ": not a directory");
  if (!std::filesystem::exists(config_path, ec)) {
    return not_found(dir + ": no config.json (not a Hugging Face checkpoint directory?)");
  }
  QS_ASSIGN_OR_RETURN(json config, read_json(config_path));
  if (!config.is_object()) return data_loss(config_path + ": expected a JSON object");
  if (auto it = config.find("architectures");
      it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    s.architecture = (*it)[0].get<std::string>();
  }
  if (auto it = config.find("model_type"); it != config.end() && it->is_string()) {
    s.model_type = it->get<std::string>();
  }
  for (const char* key : kHyperParameterKeys) {
    if (auto it = config.find(key); it != config.end() && !it->is_null()) {
      s.hyper_parameters.emplace_back(key, *it);
    }
  }

  QS_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir));
  std::set<std::string> files;
  for (const auto& name : ckpt.names()) {
    QS_ASSIGN_OR_RETURN(Tensor t, ckpt.get(name));
    files.insert(ckpt.file_of(name));
    DTypeUsage& u = s.dtypes[dtype_name(t.dtype)];
    ++u.n_tensors;
    u.n_elements += t.numel();
    u.n_bytes += t.nbytes();
    ++s.n_tensors;
    s.n_parameters += t.numel();
    s.total_bytes += t.nbytes();
  }
  s.files.assign(files.begin(), files.end());
  return s;
}

json summary_to_json(const CheckpointSummary& s) {
  json hp = json::object();
  for (const auto& [key, value] : s.hyper_parameters) hp[key] = value;
  json dtypes = json::object();
  for (const auto& [name, u] : s.dtypes) {
    dtypes[name] = {{"tensors", u.n_tensors}, {"elements", u.n_elements}, {"bytes", u.n_bytes}};
  }
  return {
      {"dir", s.dir},
      {"architecture", s.architecture},
      {"model_type", s.model_type},
      {"hyper_parameters", hp},
      {"files", s.files},
      {"tensors", s.n_tensors},
      {"parameters", s.n_parameters},
      {"dtypes", dtypes},
      {"weight_bytes", s.total_bytes},
  };
}

std::string summary_to_text(const CheckpointSummary& s) {
  std::string out;
  line(&out, "checkpoint", s.dir);
  std::string arch = s.architecture.empty() ? "(unknown)" : s.architecture;
  if (!s.model_type.empty()) arch += " (model_type " + s.model_type + ")";
  line(&out, "architecture", arch);
  for (const auto& [key, value] : s.hyper_parameters) {
    line(&out, key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  std::string files = std::to_string(s.files.size());
  if (s.files.size() == 1) files += " (" + s.files[0] + ")";
  line(&out, "files", files);
  line(&out, "tensors", std::to_string(s.n_tensors));
  line(&out, "parameters",
       human_count(s.n_parameters) + " (" + std::to_string(s.n_parameters) + ")");
  for (const auto& [name, u] : s.dtypes) {
    line(&out, "dtype " + name,
         std::to_string(u.n_tensors) + " tensors, " + std::to_string(u.n_elements) + " elements, " +
             human_bytes(u.n_bytes) + " (" + std::to_string(u.n_bytes) + " bytes)");
  }
  line(&out, "weight memory",
       human_bytes(s.total_bytes) + " (" + std::to_string(s.total_bytes) + " bytes)");
  return out;
}

}  // namespace qs::io
