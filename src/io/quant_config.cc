// io: quantization detection. Reads a checkpoint's quantization_config (AutoRound, GPTQ, AWQ,
// compressed-tensors, fp8), normalizes it the way vLLM and the producers' own loaders do, and
// turns every per-layer key into an ordered list of rules that scheme_for() walks. All the
// checking happens at parse time, once: a rule that exists holds a scheme the formats table
// accepts. The methods are parsed in quant_config_int.cc and quant_config_ct_fp8.cc.
#include "io/quant_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "core/check.h"
#include "core/json.h"
#include "io/checkpoint.h"
#include "io/quant_config_rules.h"

namespace qs::io {

bool QuantConfig::Rule::matches(const std::string& module) const {
  switch (match) {
    case Match::kExact:
      return module == text;
    case Match::kSearch:
      return std::regex_search(module, regex);
    case Match::kMatchStart:
      return std::regex_search(module, regex, std::regex_constants::match_continuous);
    case Match::kSubstring:
      return module.find(text) != std::string::npos;
    case Match::kBlock:
      return module.size() > text.size() && module.compare(0, text.size(), text) == 0 &&
             module[text.size()] == '.';
    case Match::kNotListed: {
      // vLLM tests `name in module` as a substring; we align it to whole name components
      // so that "mlp.gate" (a router) does not also select "mlp.gate_proj".
      const std::string dotted = "." + module + ".";
      return std::none_of(names.begin(), names.end(), [&](const std::string& n) {
        return dotted.find("." + n + ".") != std::string::npos;
      });
    }
    case Match::kRouter: {
      const size_t dot = module.rfind('.');
      return (dot == std::string::npos ? module : module.substr(dot + 1)) == "gate";
    }
    case Match::kAny:
      return true;
  }
  return false;
}

namespace detail {
namespace {

bool is_int_layout(Layout l) {
  return l == Layout::kGptq || l == Layout::kAwq || l == Layout::kCtPacked || l == Layout::kCtInt;
}

}  // namespace

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const json* find(const json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

const json* find_any(const json& obj, std::initializer_list<const char*> keys, std::string* key) {
  for (const char* k : keys) {
    if (const json* v = find(obj, k)) {
      *key = k;
      return v;
    }
  }
  return nullptr;
}

Result<int64_t> as_int(const json& v, const Where& w, const std::string& key) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    // Range first: converting a double outside int64 (or NaN) to an integer is UB.
    // 2^63 is exact as a double; the half-open range keeps every accepted value convertible.
    const double d = v.get<double>();
    if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) return static_cast<int64_t>(d);
  }
  return w.invalid(key, v, "expected an integer");
}

Result<int64_t> get_int(const json& obj, const Where& w, const std::string& key, int64_t dflt) {
  const json* v = find(obj, key);
  if (!v) return dflt;
  return as_int(*v, w, key);
}

// A bit width: an integer the int layouts (2..8), fp8 (8) or "kept in 16 bits" (>= 16) can
// mean; anything past 64 is no bit width at all.
Result<int> as_bits(const json& v, const Where& w, const std::string& key) {
  QS_ASSIGN_OR_RETURN(int64_t bits, as_int(v, w, key));
  if (bits < 1 || bits > 64) return w.invalid(key, v, "not a bit width");
  return static_cast<int>(bits);
}

Result<int> get_bits(const json& obj, const Where& w, const std::string& key, int dflt) {
  const json* v = find(obj, key);
  if (!v) return dflt;
  return as_bits(*v, w, key);
}

Result<bool> get_bool(const json& obj, const Where& w, const std::string& key, bool dflt) {
  const json* v = find(obj, key);
  if (!v) return dflt;
  if (!v->is_boolean()) return w.invalid(key, *v, "expected true or false");
  return v->get<bool>();
}

Result<std::string> get_string(const json& obj, const Where& w, const std::string& key,
                               const std::string& dflt) {
  const json* v = find(obj, key);
  if (!v) return dflt;
  if (!v->is_string()) return w.invalid(key, *v, "expected a string");
  return v->get<std::string>();
}

Result<std::vector<std::string>> get_strings(const json& obj, const Where& w,
                                             const std::string& key) {
  std::vector<std::string> out;
  const json* v = find(obj, key);
  if (!v) return out;
  if (v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  if (!v->is_array()) return w.invalid(key, *v, "expected a list of module names");
  for (const json& e : *v) {
    if (!e.is_string()) return w.invalid(key, *v, "expected a list of module names");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// Python regexes as the producers write them (`.*mlp\.gate.*`, `model\.layers\.\d+`) are
// valid ECMAScript; the few Python-only constructs ((?P<..>), inline flags) are errors.
Result<std::regex> compile(const std::string& pattern, const Where& w, const std::string& key) {
  try {
    return std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    return w.invalid(key, pattern, std::string("not a regular expression we can run: ") + e.what());
  }
}

// What the formats table can hold: int layouts 2/3/4/8 bits (AWQ 4 only, ct-int any width up
// to 8 since it stores one int8 per weight), groups -1 or > 0 (ct-int also 0 = per tensor);
// fp8 is 8 bits per tensor (0), per channel (-1) or per block.
Status validate(const QuantScheme& s, const Where& w, const std::string& bits_key,
                const std::string& group_key) {
  if (s.layout == Layout::kDense) return ok_status();
  if (s.layout == Layout::kAwq && s.bits != 4) {
    return w.unsupported(bits_key, s.bits, "the AWQ GEMM layout is 4-bit only");
  }
  if (s.layout == Layout::kCtInt) {
    if (s.bits < 2 || s.bits > 8) {
      return w.invalid(bits_key, s.bits, "int-quantized weights are stored as int8: 2..8 bits");
    }
  } else if (is_int_layout(s.layout) && s.bits != 2 && s.bits != 3 && s.bits != 4 && s.bits != 8) {
    return w.invalid(bits_key, s.bits, "must be one of 2, 3, 4, 8");
  }
  if (s.layout == Layout::kFp8) {
    if (s.bits != 8) return w.invalid(bits_key, s.bits, "fp8 weights are 8-bit");
    if (s.block_n > 0 || s.block_k > 0) {
      if (s.block_n <= 0 || s.block_k <= 0) {
        return w.invalid(group_key, json::array({s.block_n, s.block_k}),
                         "block sizes must be positive");
      }
    } else if (s.group_size > 0) {
      return w.unsupported(group_key, s.group_size,
                           "fp8 weights are scaled per tensor, per channel or per block, "
                           "not per group");
    }
    if (!s.sym) return w.unsupported("symmetric", false, "fp8 weights are symmetric");
    return ok_status();
  }
  if (s.group_size < -1 || (s.group_size == 0 && s.layout != Layout::kCtInt)) {
    return w.invalid(group_key, s.group_size,
                     "must be -1 (one group per output channel) or a positive group size");
  }
  return ok_status();
}

}  // namespace detail

namespace {

namespace fs = std::filesystem;
using detail::find;
using detail::json;
using detail::Layout;
using detail::lower;
using detail::Parsed;
using detail::QuantScheme;
using detail::Where;

constexpr const char* kSupportedMethods = "auto-round, gptq, awq, compressed-tensors, fp8";

// quant_method as vLLM normalizes it, plus the aliases older producers write.
Result<std::string> normalize_method(const json& qc, const Where& w, Parsed* p) {
  if (const json* m = find(qc, "quant_method")) {
    if (!m->is_string()) return w.invalid("quant_method", *m, "expected a string");
    const std::string raw = m->get<std::string>();
    const std::string method = lower(raw);
    if (method == "auto-round" || method == "auto_round" || method == "autoround" ||
        method == "intel/auto-round") {
      return std::string("auto-round");
    }
    if (method == "compressed-tensors" || method == "compressed_tensors") {
      return std::string("compressed-tensors");
    }
    // Kernel names that some exports write: the tensors are the plain GPTQ / AWQ layouts.
    if (method == "gptq" || method == "gptq_marlin") return std::string("gptq");
    if (method == "awq" || method == "awq_marlin") return std::string("awq");
    if (method == "fp8") return method;
    if (method == "marlin" || method == "gptq_marlin_24" || method == "bitblas" ||
        method == "gptq_bitblas") {
      return w.unsupported("quant_method", raw,
                           "weights repacked for a GPU kernel are not supported; use the "
                           "plain GPTQ checkpoint");
    }
    return w.unsupported(
        "quant_method", raw,
        std::string("unknown quant_method '") + raw + "' (supported: " + kSupportedMethods + ")");
  }
  if (const json* producer = find(qc, "producer"); producer && producer->is_object()) {
    if (const json* name = find(*producer, "name"); name && *name == "modelopt") {
      return w.unsupported("producer.name", *name,
                           "NVIDIA ModelOpt checkpoints are not supported (supported: " +
                               std::string(kSupportedMethods) + ")");
    }
  }
  // AutoAWQ's quant_config.json and old AutoGPTQ quantize_config.json carry no quant_method.
  if (find(qc, "w_bit") || find(qc, "q_group_size") || find(qc, "zero_point")) {
    p->notes.push_back("no quant_method: AutoAWQ keys (w_bit/q_group_size/zero_point) mean awq");
    return std::string("awq");
  }
  if (find(qc, "bits") && find(qc, "group_size")) {
    p->notes.push_back("no quant_method: bits and group_size without it mean an AutoGPTQ config");
    return std::string("gptq");
  }
  return w.missing("quant_method", std::string("cannot tell how the checkpoint is quantized (") +
                                       "supported: " + kSupportedMethods + ")");
}

// Where messages about keys of a config from `source` point to: "config.json" holds it
// under quantization_config (or the key named after it), side files at the top level.
std::string key_path(const std::string& source) {
  if (source.rfind("config.json", 0) != 0) return "";
  const size_t space = source.find(' ');
  return space == std::string::npos ? "quantization_config" : source.substr(space + 1);
}

std::string scheme_text(const QuantScheme& s) {
  if (!s.quantized()) return "dense";
  std::string out;
  if (s.layout == Layout::kFp8) {
    out = "fp8 e4m3 ";
    if (s.block_n > 0) {
      out += "block " + std::to_string(s.block_n) + "x" + std::to_string(s.block_k);
    } else {
      out += s.group_size == 0 ? "per-tensor" : "per-channel";
    }
    return out;
  }
  out = "int" + std::to_string(s.bits) + " ";
  out += s.group_size > 0    ? "g" + std::to_string(s.group_size)
         : s.group_size == 0 ? std::string("per-tensor")
                             : std::string("per-channel");
  out += s.sym ? " sym" : " asym";
  if (s.desc_act) out += " act-order";
  return out;
}

}  // namespace
Result<QuantConfig> parse_quant_config(const json& qc, const std::string& source) {
  const Where w{source, key_path(source)};
  if (!qc.is_object()) {
    return invalid_argument(source + ": " + (w.path.empty() ? "the file" : w.path) +
                            " must be a JSON object, found " + qc.dump());
  }
  Parsed p;
  QS_ASSIGN_OR_RETURN(p.method, normalize_method(qc, w, &p));
  if (p.method == "auto-round") {
    QS_RETURN_IF_ERROR(parse_autoround(qc, w, &p));
  } else if (p.method == "gptq") {
    QS_RETURN_IF_ERROR(parse_gptq(qc, w, &p));
  } else if (p.method == "awq") {
    QS_RETURN_IF_ERROR(parse_awq(qc, w, &p));
  } else if (p.method == "fp8") {
    QS_RETURN_IF_ERROR(parse_fp8(qc, w, &p));
  } else {
    QS_CHECK(p.method == "compressed-tensors");
    QS_RETURN_IF_ERROR(parse_compressed_tensors(qc, w, &p));
  }
  QuantConfig c;
  c.method_ = std::move(p.method);
  c.source_ = source;
  c.format_ = std::move(p.format);
  c.default_ = p.dflt;
  c.rules_ = std::move(p.rules);
  c.notes_ = std::move(p.notes);
  c.raw_ = qc;
  return c;
}

Result<QuantConfig> load_quant_config(const std::string& dir, const json& config) {
  // config.json first, in vLLM's order (vllm-serving.md §1.1).
  for (const char* key : {"quantization_config", "compression_config"}) {
    if (const json* qc = find(config, key)) {
      return parse_quant_config(
          *qc, std::string("config.json") +
                   (std::string(key) == "quantization_config" ? "" : std::string(" ") + key));
    }
  }
  if (const json* text = find(config, "text_config")) {
    if (const json* qc = find(*text, "quantization_config")) {
      return parse_quant_config(*qc, "config.json text_config.quantization_config");
    }
  }
  // Side files: AutoRound, AutoGPTQ / GPTQModel / AutoAWQ, AutoAWQ, ModelOpt.
  for (const char* name : {"quantization_config.json", "quantize_config.json", "quant_config.json",
                           "hf_quant_config.json"}) {
    const fs::path path = fs::path(dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    QS_ASSIGN_OR_RETURN(json qc, read_json(path.string()));
    return parse_quant_config(qc, name);
  }
  return QuantConfig{};
}

formats::QuantScheme QuantConfig::scheme_for(const std::string& module) const {
  const std::string stored = root_ + module;
  for (const auto& rule : rules_) {
    if (rule->matches(stored) || (!root_.empty() && rule->matches(module))) return rule->scheme;
  }
  return default_;
}

QuantConfig QuantConfig::rooted(const std::string& prefix) const {
  QuantConfig c = *this;
  c.root_ = root_ + prefix;
  return c;
}

std::string QuantConfig::summary() const {
  if (!quantized()) return "not quantized";
  std::string out = method_;
  if (!format_.empty()) out += " (" + format_ + ")";
  out += " " + scheme_text(default_) + ", from " + source_;
  if (!root_.empty()) out += ", read under '" + root_ + "'";
  return out;
}

Status check_requested_quantization(const QuantConfig& detected, const std::string& requested) {
  if (requested.empty()) return ok_status();
  const std::string r = lower(requested);
  if (!detected.quantized()) {
    return invalid_argument("--quantization " + requested +
                            ": the checkpoint carries no quantization_config and quantizing at "
                            "load time is not supported; quantize it offline first");
  }
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kAccepted = {
      {"auto-round", {"auto-round", "auto_round", "autoround", "intel/auto-round", "inc"}},
      {"gptq", {"gptq", "gptq_marlin", "marlin"}},
      {"awq", {"awq", "awq_marlin"}},
      {"compressed-tensors", {"compressed-tensors", "compressed_tensors"}},
      {"fp8", {"fp8"}},
  };
  for (const auto& [method, names] : kAccepted) {
    if (method == detected.method() && std::find(names.begin(), names.end(), r) != names.end()) {
      return ok_status();
    }
  }
  return invalid_argument("--quantization " + requested +
                          " does not match the checkpoint's quantization method " +
                          detected.method() + " (from " + detected.source() + ")");
}

}  // namespace qs::io
