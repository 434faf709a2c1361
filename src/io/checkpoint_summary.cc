// io: checkpoint summary for `quantserve inspect`.
#include "io/checkpoint_summary.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <tuple>

#include "core/json.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"

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
    "shared_expert_intermediate_size",
    "norm_topk_prob",
    "decoder_sparse_step",
    "mlp_only_layers",
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

std::string bytes_text(uint64_t n) {
  return human_bytes(n) + " (" + std::to_string(n) + " bytes)";
}

// Layers that differ only in their block index share one row of the text table:
// "model.layers.*.self_attn.q_proj" when every block is in it, else "model.layers.[0-2,4].x".
// Further indices (MoE experts) are folded the same way: "model.layers.*.mlp.experts.*.up_proj".
struct LinearGroup {
  std::string pattern;           // the name with every ".<digits>." replaced by ".*."
  std::vector<int64_t> indices;  // distinct block indices, in order of appearance
  int64_t members = 0;
  const LinearReport* first = nullptr;
};

// Splits "model.layers.12.mlp.up_proj" into ("model.layers.", 12, ".mlp.up_proj"); index -1
// when the name has no numeric component.
std::tuple<std::string, int64_t, std::string> split_index(const std::string& name) {
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) break;
    size_t end = dot + 1;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end > dot + 1 && end - dot - 1 <= 9 && (end == name.size() || name[end] == '.')) {
      return {name.substr(0, dot + 1), std::stoll(name.substr(dot + 1, end - dot - 1)),
              name.substr(end)};
    }
    start = dot + 1;
  }
  return {name, -1, ""};
}

// [0,1,2,4,5] -> "0-2,4-5"
std::string index_ranges(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(v[i]);
    if (j > i) out += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return out;
}

// ".3.up_proj" -> ".*.up_proj": the indices after the block's.
std::string fold_indices(std::string tail) {
  for (;;) {
    auto [head, index, rest] = split_index(tail);
    if (index < 0) return tail;
    tail = head + "*" + rest;
  }
}

std::vector<std::string> linear_table(const std::vector<LinearReport>& linears) {
  std::vector<LinearGroup> groups;
  std::set<int64_t> all_indices;
  for (const auto& l : linears) {
    auto [head, index, tail] = split_index(l.name);
    const std::string pattern = index < 0 ? l.name : head + "*" + fold_indices(tail);
    if (index >= 0) all_indices.insert(index);
    auto same = [&](const LinearGroup& g) {
      const LinearReport& f = *g.first;
      return g.pattern == pattern && f.scheme == l.scheme && f.kernel == l.kernel && f.n == l.n &&
             f.k == l.k && f.stored_bytes == l.stored_bytes && f.resident_bytes == l.resident_bytes;
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) {
      groups.push_back({pattern, {}, 0, &l});
      it = groups.end() - 1;
    }
    ++it->members;
    if (index >= 0 && (it->indices.empty() || it->indices.back() != index)) {
      it->indices.push_back(index);
    }
  }
  std::vector<std::vector<std::string>> rows = {
      {"module", "count", "shape [n, k]", "scheme", "kernel", "stored", "resident", "as bf16"}};
  for (const auto& g : groups) {
    std::string name = g.first->name;
    if (g.members > 1) {
      auto [head, index, tail] = split_index(g.first->name);
      const bool every = g.indices.size() == all_indices.size();
      const std::string blocks = g.indices.size() == 1 ? std::to_string(index)
                                 : every               ? "*"
                                                       : "[" + index_ranges(g.indices) + "]";
      name = head + blocks + fold_indices(tail);
    }
    const LinearReport& f = *g.first;
    rows.push_back({name, "x" + std::to_string(g.members),
                    "[" + std::to_string(f.n) + ", " + std::to_string(f.k) + "]", f.scheme,
                    f.kernel, human_bytes(f.stored_bytes), human_bytes(f.resident_bytes),
                    human_bytes(f.bf16_bytes())});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::vector<std::string> out;
  for (const auto& r : rows) {
    std::string text;
    for (size_t c = 0; c < r.size(); ++c) {
      std::string cell = r[c];
      // Byte columns (the last three) align right, as numbers do.
      const bool right = c + 3 >= r.size();
      const std::string pad(width[c] - cell.size(), ' ');
      text += "  " + (right ? pad + cell : cell + (c + 1 < r.size() ? pad : ""));
    }
    out.push_back(text);
  }
  return out;
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
    s.n_stored_elements += t.numel();
    s.total_bytes += t.nbytes();
  }
  s.n_parameters = s.n_stored_elements;
  s.files.assign(files.begin(), files.end());
  QS_ASSIGN_OR_RETURN(QuantConfig quant, load_quant_config(dir, config));
  if (quant.quantized()) {
    s.quant_method = quant.method();
    s.quant_summary = quant.summary();
    s.quant_notes = quant.notes();
  }
  return s;
}

void set_loaded_linears(CheckpointSummary* s, std::vector<LinearReport> linears,
                        uint64_t model_resident_bytes) {
  s->n_parameters = s->n_stored_elements;
  for (const auto& l : linears) {
    if (l.quantized) s->n_parameters += l.n * l.k - l.stored_elements;
  }
  s->linears = std::move(linears);
  s->model_resident_bytes = model_resident_bytes;
}

json summary_to_json(const CheckpointSummary& s) {
  json hp = json::object();
  for (const auto& [key, value] : s.hyper_parameters) hp[key] = value;
  json dtypes = json::object();
  for (const auto& [name, u] : s.dtypes) {
    dtypes[name] = {{"tensors", u.n_tensors}, {"elements", u.n_elements}, {"bytes", u.n_bytes}};
  }
  json quantization = nullptr;
  if (!s.quant_method.empty()) {
    json linears = json::array();
    uint64_t stored = 0, resident = 0, bf16 = 0;
    for (const auto& l : s.linears) {
      linears.push_back({{"name", l.name},
                         {"scheme", l.scheme},
                         {"kernel", l.kernel},
                         {"quantized", l.quantized},
                         {"shape", {l.n, l.k}},
                         {"stored_bytes", l.stored_bytes},
                         {"resident_bytes", l.resident_bytes},
                         {"bf16_bytes", l.bf16_bytes()}});
      stored += l.stored_bytes;
      resident += l.resident_bytes;
      bf16 += l.bf16_bytes();
    }
    quantization = {{"method", s.quant_method},
                    {"summary", s.quant_summary},
                    {"notes", s.quant_notes},
                    {"linears", linears},
                    {"linear_stored_bytes", stored},
                    {"linear_resident_bytes", resident},
                    {"linear_bf16_bytes", bf16},
                    {"model_resident_bytes", s.model_resident_bytes},
                    {"decode_bytes_per_token", s.decode_bytes_per_token},
                    {"model_bf16_bytes", static_cast<uint64_t>(s.n_parameters) * 2}};
  }
  return {
      {"dir", s.dir},
      {"architecture", s.architecture},
      {"model_type", s.model_type},
      {"hyper_parameters", hp},
      {"files", s.files},
      {"tensors", s.n_tensors},
      {"parameters", s.n_parameters},
      // MoE: parameters per token (dense models: the total).
      {"active_parameters", s.active_parameters > 0 ? s.active_parameters : s.n_parameters},
      {"stored_elements", s.n_stored_elements},
      {"dtypes", dtypes},
      {"weight_bytes", s.total_bytes},
      {"quantization", quantization},
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
  std::string params = human_count(s.n_parameters) + " (" + std::to_string(s.n_parameters);
  if (s.n_parameters != s.n_stored_elements) {
    params += "; quantized linears counted as n x k, " + std::to_string(s.n_stored_elements) +
              " elements stored";
  }
  line(&out, "parameters", params + ")");
  if (s.active_parameters > 0) {
    line(&out, "active parameters",
         human_count(s.active_parameters) + " (" + std::to_string(s.active_parameters) + "; " +
             s.active_note + ")");
  }
  for (const auto& [name, u] : s.dtypes) {
    line(&out, "dtype " + name,
         std::to_string(u.n_tensors) + " tensors, " + std::to_string(u.n_elements) + " elements, " +
             human_bytes(u.n_bytes) + " (" + std::to_string(u.n_bytes) + " bytes)");
  }
  line(&out, "weight memory", bytes_text(s.total_bytes));
  line(&out, "quantization", s.quant_method.empty() ? "none" : s.quant_summary);
  for (const auto& note : s.quant_notes) line(&out, "quantization note", note);
  if (s.linears.empty()) return out;
  out += "linear layers (bytes per layer):\n";
  for (const auto& row : linear_table(s.linears)) out += row + "\n";
  uint64_t stored = 0, resident = 0, bf16 = 0;
  for (const auto& l : s.linears) {
    stored += l.stored_bytes;
    resident += l.resident_bytes;
    bf16 += l.bf16_bytes();
  }
  line(&out, "linear weights stored", bytes_text(stored));
  line(&out, "linear weights resident", bytes_text(resident));
  line(&out, "linear weights as bf16", bytes_text(bf16));
  line(&out, "model weights resident",
       bytes_text(s.model_resident_bytes) + "; as bf16 " +
           bytes_text(static_cast<uint64_t>(s.n_parameters) * 2));
  if (s.decode_bytes_per_token > 0) {
    line(&out, "weights read per token", bytes_text(s.decode_bytes_per_token));
  }
  return out;
}

}  // namespace qs::io
