// io: quantization detection. Reads a checkpoint's quantization_config (AutoRound, GPTQ, AWQ,
// compressed-tensors, fp8), normalizes it the way vLLM and the producers' own loaders do, and
// turns every per-layer key into an ordered list of rules that scheme_for() walks. All the
// checking happens here, once: a rule that exists produces a scheme the formats table accepts.
#include "io/quant_config.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>

#include "core/check.h"
#include "io/checkpoint.h"

namespace qs::io {

using formats::Layout;
using formats::QuantScheme;
using nlohmann::json;

// One per-layer rule: when `match` accepts the module name, the module gets `scheme`.
// Rules are kept in priority order and the first that matches decides.
struct QuantConfig::Rule {
  enum class Match : uint8_t {
    kExact,       // module == text
    kSearch,      // regex found anywhere in the name (Python re.search: AutoRound extra_config)
    kMatchStart,  // regex matching at the start (Python re.match: GPTQModel `dynamic`,
                  // compressed-tensors "re:" targets and ignores)
    kSubstring,   // text occurs in the name (AWQ modules_to_not_convert, fp8 ignored_layers)
    kBlock,       // name starts with text + "." (AutoRound block_name_to_quantize)
    kNotListed,   // no entry of `names` occurs in the name as whole components (GPTQ
                  // modules_in_block_to_quantize: what is not listed stays dense)
    kRouter,      // last name component is "gate": a MoE router, which no producer quantizes
                  // and vLLM builds unquantized
    kAny,
  };
  Match match = Match::kAny;
  std::string text;
  std::regex regex;
  std::vector<std::string> names;
  QuantScheme scheme;

  bool matches(const std::string& module) const {
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
};

namespace {

namespace fs = std::filesystem;
using Rule = QuantConfig::Rule;
using Match = QuantConfig::Rule::Match;

constexpr const char* kSupportedMethods = "auto-round, gptq, awq, compressed-tensors, fp8";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Where a key lives, for messages: "config.json: quantization_config.extra_config[...].bits".
struct Where {
  std::string source;  // "config.json", "quantize_config.json", ...
  std::string path;    // "quantization_config", "quantization_config.config_groups.group_0"

  Where at(const std::string& sub) const { return {source, path + sub}; }
  std::string name(const std::string& key) const {
    if (key.empty() || path.empty()) return source + ": " + path + key;
    return source + ": " + path + "." + key;
  }
  Status invalid(const std::string& key, const json& value, const std::string& why) const {
    return invalid_argument(name(key) + " = " + value.dump() + ": " + why);
  }
  Status unsupported(const std::string& key, const json& value, const std::string& why) const {
    return unimplemented(name(key) + " = " + value.dump() + ": " + why);
  }
  Status missing(const std::string& key, const std::string& why) const {
    return invalid_argument(name(key) + " is missing: " + why);
  }
};

const json* find(const json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// The first of `keys` present (AWQ spells bits as `bits` or `w_bit`), or nullptr.
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
    const double d = v.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
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

// A list of strings; a single string is a list of one.
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

bool is_int_layout(Layout l) {
  return l == Layout::kGptq || l == Layout::kAwq || l == Layout::kCtPacked || l == Layout::kCtInt;
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

// ---------------------------------------------------------------------------------------------
// AutoRound (autoround.md §3.1, §3.5, §3.6)

struct Packing {
  Layout layout;
  bool zero_minus_one;
};

// packing_format (or the legacy `backend`) as AutoRound's loader normalizes it.
Result<std::pair<std::string, Packing>> autoround_packing(const std::string& raw, const Where& w,
                                                          const std::string& key) {
  const std::string p = lower(raw);
  if (p == "auto" || p == "auto_round:auto_gptq" || p == "auto_round:gptq" || p == "auto_gptq") {
    return std::pair{std::string("auto_round:auto_gptq"), Packing{Layout::kGptq, true}};
  }
  if (p == "auto_round:auto_awq" || p == "auto_round:awq" || p == "auto_awq") {
    return std::pair{std::string("auto_round:auto_awq"), Packing{Layout::kAwq, false}};
  }
  // auto-round's own packers (and the GPTQModel one) store the true zero point.
  if (p == "auto_round" || p == "auto_round:gptqmodel" || p == "auto_round:exllamav2" ||
      p == "auto_round:tritonv2" || p == "auto_round:triton") {
    return std::pair{p, Packing{Layout::kGptq, false}};
  }
  if (p.rfind("auto_round:fp8", 0) == 0) {
    return std::pair{p, Packing{Layout::kFp8, false}};
  }
  // Legacy (<= 0.4) backends naming a GPTQ kernel, e.g. "auto_round:gptq:exllamav2", were
  // packed by AutoGPTQ's packer: zero - 1.
  if (contains(p, "gptq")) return std::pair{p, Packing{Layout::kGptq, true}};
  return w.unsupported(key, raw,
                       "unknown AutoRound packing format (supported: auto_round:auto_gptq, "
                       "auto_round:auto_awq, auto_round, auto_round:fp8 and their legacy "
                       "spellings; MX/NV fp4 and llm_compressor packings are not supported)");
}

// Applies the int scheme keys of `obj` (top level or one extra_config entry) onto `s`.
Status apply_autoround_keys(const json& obj, const Where& w, QuantScheme* s) {
  QS_ASSIGN_OR_RETURN(s->bits, get_bits(obj, w, "bits", s->bits));
  QS_ASSIGN_OR_RETURN(s->sym, get_bool(obj, w, "sym", s->sym));
  if (const json* g = find(obj, "group_size")) {
    if (g->is_array()) {
      if (g->size() != 2) return w.invalid("group_size", *g, "expected [block_n, block_k]");
      QS_ASSIGN_OR_RETURN(s->block_n, as_int((*g)[0], w, "group_size"));
      QS_ASSIGN_OR_RETURN(s->block_k, as_int((*g)[1], w, "group_size"));
      s->group_size = 0;
    } else {
      QS_ASSIGN_OR_RETURN(s->group_size, as_int(*g, w, "group_size"));
      s->block_n = s->block_k = 0;
    }
  }
  return ok_status();
}

// data_type of the whole checkpoint or of one layer: "int" (also older "int_sym" spellings),
// "fp"/"float" (fp8 at 8 bits, dense at 16); MX/NV formats are not supported.
Result<bool> autoround_is_float(const json& obj, const Where& w) {
  QS_ASSIGN_OR_RETURN(std::string dt, get_string(obj, w, "data_type", "int"));
  dt = lower(dt);
  if (dt.rfind("int", 0) == 0) return false;
  if (dt == "fp" || dt == "float" || dt == "fp8" || dt == "fp8_e4m3" || dt == "fp8_e4m3fn") {
    return true;
  }
  return w.unsupported("data_type", dt, "only int and fp (fp8) AutoRound data types are supported");
}

// What parsing one method produces; parse_quant_config moves it into the QuantConfig.
struct Parsed {
  std::string method, format;
  QuantScheme dflt;
  std::vector<std::shared_ptr<const Rule>> rules;
  std::vector<std::string> notes;

  void add(Match match, std::string text, const QuantScheme& scheme, std::regex regex = {}) {
    auto rule = std::make_shared<Rule>();
    rule->match = match;
    rule->text = std::move(text);
    rule->regex = std::move(regex);
    rule->scheme = scheme;
    rules.push_back(std::move(rule));
  }
};

// One extra_config entry: `entry` is a dict of the keys that differ from the default.
Result<QuantScheme> autoround_layer(const json& entry, const Where& w, const QuantScheme& dflt) {
  if (!entry.is_object()) return w.invalid("", entry, "expected an object of scheme keys");
  QS_ASSIGN_OR_RETURN(int bits, get_bits(entry, w, "bits", dflt.bits));
  if (bits >= 16) return QuantScheme{};  // kept in 16 bits ({"bits":16,"data_type":"fp"})
  if (find(entry, "data_type")) {
    QS_ASSIGN_OR_RETURN(bool is_float, autoround_is_float(entry, w));
    if (is_float != (dflt.layout == Layout::kFp8)) {
      return w.unsupported(
          "data_type", *find(entry, "data_type"),
          std::string(is_float ? "an fp8 layer in an int" : "an int layer in an fp8") +
              " checkpoint: one checkpoint mixing int and fp8 layers is not "
              "supported");
    }
  }
  QuantScheme s = dflt;
  QS_RETURN_IF_ERROR(apply_autoround_keys(entry, w, &s));
  QS_RETURN_IF_ERROR(validate(s, w, "bits", "group_size"));
  return s;
}

// block_name_to_quantize (or the older to_quant_block_names): a comma-joined string or a
// list (possibly nested) of block-list prefixes.
Result<std::vector<std::string>> autoround_blocks(const json& qc, const Where& w) {
  std::string key = "block_name_to_quantize";
  const json* v = find(qc, key);
  if (!v) {
    key = "to_quant_block_names";
    v = find(qc, key);
  }
  // Pure-LLM exports may omit it; our decoder's blocks are model.layers.N.
  if (!v) return std::vector<std::string>{"model.layers"};
  std::vector<std::string> out;
  auto split = [&](const std::string& s) {
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, ',')) {
      const auto b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
      if (b != std::string::npos) out.push_back(part.substr(b, e - b + 1));
    }
  };
  std::vector<const json*> stack{v};
  while (!stack.empty()) {
    const json* e = stack.back();
    stack.pop_back();
    if (e->is_string()) {
      split(e->get<std::string>());
    } else if (e->is_array()) {
      for (auto it = e->rbegin(); it != e->rend(); ++it) stack.push_back(&*it);
    } else {
      return w.invalid(key, *v, "expected a comma-joined string or a list of block names");
    }
  }
  if (out.empty()) return w.invalid(key, *v, "names no block");
  return out;
}

Status parse_autoround(const json& qc, const Where& w, Parsed* p) {
  std::string key = "packing_format";
  const json* pf = find(qc, key);
  if (!pf) {
    key = "backend";
    pf = find(qc, key);
  }
  if (pf && !pf->is_string()) return w.invalid(key, *pf, "expected a string");
  QS_ASSIGN_OR_RETURN(bool is_float, autoround_is_float(qc, w));
  Packing packing{Layout::kGptq, true};
  p->format = "auto_round:auto_gptq";
  if (pf) {
    QS_ASSIGN_OR_RETURN(auto normalized, autoround_packing(pf->get<std::string>(), w, key));
    p->format = normalized.first;
    packing = normalized.second;
  } else if (is_float) {
    // FP8 weight-only exports write no packing_format.
    p->format = "auto_round:fp8";
    packing = {Layout::kFp8, false};
  }
  if ((packing.layout == Layout::kFp8) != is_float) {
    const json* dt = find(qc, "data_type");
    return w.invalid("data_type", dt ? *dt : json("int"),
                     "does not fit packing format " + p->format +
                         (is_float ? ", which holds int weights" : ", which holds fp8 weights"));
  }
  QuantScheme& d = p->dflt;
  d.layout = packing.layout;
  d.zero_minus_one = packing.zero_minus_one;
  d.bits = is_float ? 8 : 4;
  d.group_size = is_float ? -1 : 128;
  QS_RETURN_IF_ERROR(apply_autoround_keys(qc, w, &d));
  QS_RETURN_IF_ERROR(validate(d, w, "bits", "group_size"));

  QS_ASSIGN_OR_RETURN(int64_t act_bits, get_int(qc, w, "act_bits", 16));
  if (act_bits < 16) {
    p->notes.push_back("activations were quantized to " + std::to_string(act_bits) +
                       " bits at export (act_bits); we run the weights with f32 activations");
  }
  for (const char* kv : {"static_kv_dtype", "static_attention_dtype"}) {
    if (find(qc, kv)) p->notes.push_back(std::string(kv) + " is set; the KV cache ignores it");
  }

  // extra_config: exact names first, then every key as a regex searched in the name. Our JSON
  // objects do not keep file order, so among several matching regex keys the first in byte
  // order wins (Python would take the first in the file).
  std::vector<std::pair<std::string, QuantScheme>> layers;
  if (const json* ec = find(qc, "extra_config")) {
    if (!ec->is_object()) return w.invalid("extra_config", *ec, "expected an object");
    for (const auto& [name, entry] : ec->items()) {
      QS_ASSIGN_OR_RETURN(QuantScheme s,
                          autoround_layer(entry, w.at(".extra_config[\"" + name + "\"]"), d));
      layers.emplace_back(name, s);
    }
  }
  for (const auto& [name, s] : layers) p->add(Match::kExact, name, s);
  for (const auto& [name, s] : layers) {
    QS_ASSIGN_OR_RETURN(std::regex re, compile(name, w, "extra_config key"));
    p->add(Match::kSearch, name, s, std::move(re));
  }
  // AutoRound keeps every MoE router (a module named *.gate) in 16 bits (autoround.md §1.7).
  p->add(Match::kRouter, "", QuantScheme{});
  QS_ASSIGN_OR_RETURN(auto blocks, autoround_blocks(qc, w));
  for (const auto& b : blocks) p->add(Match::kBlock, b, d);
  p->add(Match::kAny, "", QuantScheme{});  // lm_head and everything outside the blocks
  return ok_status();
}

// ---------------------------------------------------------------------------------------------
// GPTQ (AutoGPTQ / GPTQModel; vllm-serving.md §2.1)

// The override dict of one GPTQModel `dynamic` rule onto the default scheme.
Result<QuantScheme> gptq_override(const json& entry, const Where& w, const QuantScheme& dflt) {
  if (!entry.is_object()) return w.invalid("", entry, "expected an object of overrides");
  QuantScheme s = dflt;
  QS_ASSIGN_OR_RETURN(s.bits, get_bits(entry, w, "bits", s.bits));
  QS_ASSIGN_OR_RETURN(s.group_size, get_int(entry, w, "group_size", s.group_size));
  QS_ASSIGN_OR_RETURN(s.sym, get_bool(entry, w, "sym", s.sym));
  QS_ASSIGN_OR_RETURN(s.desc_act, get_bool(entry, w, "desc_act", s.desc_act));
  if (s.group_size == -1) s.desc_act = false;  // one group: the permutation changes nothing
  QS_RETURN_IF_ERROR(validate(s, w, "bits", "group_size"));
  return s;
}

Status parse_gptq(const json& qc, const Where& w, Parsed* p) {
  QuantScheme& d = p->dflt;
  d.layout = Layout::kGptq;
  if (!find(qc, "bits")) return w.missing("bits", "GPTQ configs name the weight bits");
  if (!find(qc, "group_size")) return w.missing("group_size", "GPTQ configs name the group size");
  QS_ASSIGN_OR_RETURN(d.bits, get_bits(qc, w, "bits", 4));
  QS_ASSIGN_OR_RETURN(d.group_size, get_int(qc, w, "group_size", 128));
  QS_ASSIGN_OR_RETURN(d.sym, get_bool(qc, w, "sym", true));
  QS_ASSIGN_OR_RETURN(d.desc_act, get_bool(qc, w, "desc_act", false));
  // desc_act with one group per row is no act-order at all (vLLM treats it so).
  if (d.group_size == -1) d.desc_act = false;
  QS_RETURN_IF_ERROR(validate(d, w, "bits", "group_size"));

  QS_ASSIGN_OR_RETURN(bool marlin, get_bool(qc, w, "is_marlin_format", false));
  if (marlin) {
    return w.unsupported("is_marlin_format", true,
                         "Marlin-repacked GPTQ weights are not supported; use the plain GPTQ "
                         "checkpoint");
  }
  // config.json spells it checkpoint_format, GPTQModel's quantize_config.json `format`.
  std::string fkey = find(qc, "checkpoint_format") ? "checkpoint_format" : "format";
  QS_ASSIGN_OR_RETURN(std::string fmt, get_string(qc, w, fkey, "gptq"));
  fmt = lower(fmt);
  if (fmt == "gptq") {
    d.zero_minus_one = true;  // v1: qzeros hold zero - 1
  } else if (fmt == "gptq_v2") {
    d.zero_minus_one = false;
  } else {
    return w.unsupported(fkey, fmt,
                         "only the gptq (v1) and gptq_v2 checkpoint formats are supported "
                         "(marlin, bitblas and ipex repacks are not)");
  }
  p->format = fmt;

  // GPTQModel `dynamic`: "-:regex" keeps matching modules dense; "+:regex" or a bare regex
  // overrides bits/group_size/sym/desc_act. Python's re.match anchors at the start. Our JSON
  // objects do not keep file order, so exclusions are tried before overrides.
  std::vector<std::pair<std::regex, QuantScheme>> overrides;
  std::vector<std::pair<std::string, std::regex>> exclusions;
  std::vector<std::string> override_keys;
  if (const json* dyn = find(qc, "dynamic")) {
    if (!dyn->is_object()) return w.invalid("dynamic", *dyn, "expected an object of rules");
    for (const auto& [key, entry] : dyn->items()) {
      const Where ew = w.at(".dynamic[\"" + key + "\"]");
      if (key.rfind("-:", 0) == 0) {
        QS_ASSIGN_OR_RETURN(std::regex re, compile(key.substr(2), w, "dynamic key"));
        exclusions.emplace_back(key.substr(2), std::move(re));
      } else {
        const std::string pattern = key.rfind("+:", 0) == 0 ? key.substr(2) : key;
        QS_ASSIGN_OR_RETURN(std::regex re, compile(pattern, w, "dynamic key"));
        QS_ASSIGN_OR_RETURN(QuantScheme s, gptq_override(entry, ew, d));
        overrides.emplace_back(std::move(re), s);
        override_keys.push_back(pattern);
      }
    }
  }
  for (auto& [pattern, re] : exclusions) {
    p->add(Match::kMatchStart, pattern, QuantScheme{}, std::move(re));
  }

  QS_ASSIGN_OR_RETURN(bool lm_head, get_bool(qc, w, "lm_head", false));
  QuantScheme head;
  if (lm_head) {
    head = d;
    for (const auto& [re, s] : overrides) {
      if (std::regex_search(std::string("lm_head"), re, std::regex_constants::match_continuous)) {
        head = s;
        break;
      }
    }
  }
  p->add(Match::kExact, "lm_head", head);

  // modules_in_block_to_quantize: [["self_attn.q_proj", ...], ["mlp.down_proj"]] or flat.
  if (const json* mib = find(qc, "modules_in_block_to_quantize")) {
    auto rule = std::make_shared<Rule>();
    rule->match = Match::kNotListed;
    std::vector<const json*> stack{mib};
    while (!stack.empty()) {
      const json* e = stack.back();
      stack.pop_back();
      if (e->is_string()) {
        rule->names.push_back(e->get<std::string>());
      } else if (e->is_array()) {
        for (const json& x : *e) stack.push_back(&x);
      } else {
        return w.invalid("modules_in_block_to_quantize", *mib,
                         "expected a list (or list of lists) of module names");
      }
    }
    const bool router_listed =
        std::any_of(rule->names.begin(), rule->names.end(), [](const std::string& n) {
          return n == "gate" || (n.size() > 5 && n.compare(n.size() - 5, 5, ".gate") == 0);
        });
    p->rules.push_back(rule);
    if (!router_listed) p->add(Match::kRouter, "", QuantScheme{});
  } else {
    p->add(Match::kRouter, "", QuantScheme{});
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    p->add(Match::kMatchStart, override_keys[i], overrides[i].second, overrides[i].first);
  }
  p->add(Match::kAny, "", d);
  return ok_status();
}

// ---------------------------------------------------------------------------------------------
// AWQ (AutoAWQ GEMM; vllm-serving.md §2.2)

Status parse_awq(const json& qc, const Where& w, Parsed* p) {
  QuantScheme& d = p->dflt;
  d.layout = Layout::kAwq;
  std::string key;
  if (const json* b = find_any(qc, {"bits", "w_bit"}, &key)) {
    QS_ASSIGN_OR_RETURN(d.bits, as_bits(*b, w, key));
  } else {
    d.bits = 4;
  }
  std::string gkey = "group_size";
  if (const json* g = find_any(qc, {"group_size", "q_group_size"}, &gkey)) {
    QS_ASSIGN_OR_RETURN(d.group_size, as_int(*g, w, gkey));
  } else {
    d.group_size = 128;
  }
  QS_ASSIGN_OR_RETURN(bool zero_point, get_bool(qc, w, "zero_point", true));
  d.sym = !zero_point;
  QS_RETURN_IF_ERROR(validate(d, w, key.empty() ? "bits" : key, gkey));
  QS_ASSIGN_OR_RETURN(std::string version, get_string(qc, w, "version", "gemm"));
  if (lower(version) != "gemm") {
    return w.unsupported("version", version,
                         "only the AWQ GEMM layout is supported (not " + version + ")");
  }
  p->format = "gemm";
  QS_ASSIGN_OR_RETURN(auto skip, get_strings(qc, w, "modules_to_not_convert"));
  for (const auto& s : skip) p->add(Match::kSubstring, s, QuantScheme{});
  p->add(Match::kExact, "lm_head", QuantScheme{});  // AutoAWQ never quantizes lm_head
  p->add(Match::kRouter, "", QuantScheme{});
  p->add(Match::kAny, "", d);
  return ok_status();
}

// ---------------------------------------------------------------------------------------------
// fp8 (HF FineGrainedFP8 / DeepSeek / AutoFP8; vllm-serving.md §2.4)

Status parse_fp8(const json& qc, const Where& w, Parsed* p) {
  QuantScheme& d = p->dflt;
  d.layout = Layout::kFp8;
  d.bits = 8;
  d.group_size = 0;
  if (const json* bs = find(qc, "weight_block_size")) {
    if (!bs->is_array() || bs->size() != 2) {
      return w.invalid("weight_block_size", *bs, "expected [block_n, block_k]");
    }
    QS_ASSIGN_OR_RETURN(d.block_n, as_int((*bs)[0], w, "weight_block_size"));
    QS_ASSIGN_OR_RETURN(d.block_k, as_int((*bs)[1], w, "weight_block_size"));
  }
  QS_RETURN_IF_ERROR(validate(d, w, "bits", "weight_block_size"));
  QS_ASSIGN_OR_RETURN(std::string fmt, get_string(qc, w, "fmt", "e4m3"));
  if (lower(fmt) != "e4m3") {
    return w.unsupported("fmt", fmt, "only float8_e4m3fn weights are supported");
  }
  QS_ASSIGN_OR_RETURN(std::string act, get_string(qc, w, "activation_scheme", "dynamic"));
  act = lower(act);
  if (act != "dynamic" && act != "static") {
    return w.invalid("activation_scheme", act, "expected dynamic or static");
  }
  p->notes.push_back("activation_scheme " + act +
                     (act == "static" ? " (input_scale tensors are not used)" : "") +
                     "; we run fp8 weights with f32 activations");
  for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
    QS_ASSIGN_OR_RETURN(auto skip, get_strings(qc, w, key));
    for (const auto& s : skip) p->add(Match::kSubstring, s, QuantScheme{});
  }
  // transformers adds lm_head to the modules it does not convert, and vLLM never builds the
  // lm_head or a MoE router with the fp8 method.
  p->add(Match::kExact, "lm_head", QuantScheme{});
  p->add(Match::kRouter, "", QuantScheme{});
  p->add(Match::kAny, "", d);
  return ok_status();
}

// ---------------------------------------------------------------------------------------------
// compressed-tensors (llm-compressor; vllm-serving.md §2.5)

// The scheme of one config group's `weights` args stored in `format`.
Result<QuantScheme> ct_weights(const json& wa, const std::string& format, const Where& w) {
  if (!wa.is_object()) return w.invalid("weights", wa, "expected an object");
  const Where ww = w.at(".weights");
  QuantScheme s;
  QS_ASSIGN_OR_RETURN(s.bits, get_bits(wa, ww, "num_bits", 8));
  QS_ASSIGN_OR_RETURN(std::string type, get_string(wa, ww, "type", "int"));
  type = lower(type);
  if (type != "int" && type != "float") return ww.invalid("type", type, "expected int or float");
  QS_ASSIGN_OR_RETURN(s.sym, get_bool(wa, ww, "symmetric", true));
  if (const json* dyn = find(wa, "dynamic"); dyn && !(dyn->is_boolean() && !dyn->get<bool>())) {
    return ww.unsupported("dynamic", *dyn, "weights quantized at run time are not supported");
  }
  const json* g = find(wa, "group_size");
  if (g) {
    QS_ASSIGN_OR_RETURN(s.group_size, as_int(*g, ww, "group_size"));
  }
  std::string strategy;
  if (find(wa, "strategy")) {
    QS_ASSIGN_OR_RETURN(strategy, get_string(wa, ww, "strategy", ""));
    strategy = lower(strategy);
  } else {
    // compressed-tensors infers it: no group_size = tensor, -1 = channel, > 0 = group.
    strategy = !g ? "tensor" : s.group_size == -1 ? "channel" : "group";
  }
  if (strategy == "group") {
    if (!g || s.group_size <= 0) {
      return ww.invalid("group_size", g ? *g : json(nullptr),
                        "strategy group needs a positive group_size");
    }
  } else if (strategy == "channel") {
    s.group_size = -1;
  } else if (strategy == "tensor") {
    s.group_size = 0;
  } else if (strategy == "block") {
    const json* bs = find(wa, "block_structure");
    if (!bs) return ww.missing("block_structure", "strategy block needs [block_n, block_k]");
    if (bs->is_array() && bs->size() == 2) {
      QS_ASSIGN_OR_RETURN(s.block_n, as_int((*bs)[0], ww, "block_structure"));
      QS_ASSIGN_OR_RETURN(s.block_k, as_int((*bs)[1], ww, "block_structure"));
    } else if (bs->is_string() &&
               std::sscanf(bs->get<std::string>().c_str(), "%" SCNd64 "x%" SCNd64, &s.block_n,
                           &s.block_k) == 2) {
      // older releases wrote "128x128"
    } else {
      return ww.invalid("block_structure", *bs, "expected [block_n, block_k]");
    }
    s.group_size = 0;
  } else {
    return ww.unsupported("strategy", strategy,
                          "weights must be quantized per group, channel, tensor or block");
  }
  if (const json* ao = find(wa, "actorder")) {
    // "group" (alias "dynamic", or true) stores weight_g_idx; "weight" (alias "static")
    // reorders columns at quantization time only, so nothing is stored.
    const std::string a = ao->is_string() ? lower(ao->get<std::string>()) : "";
    if (ao->is_boolean()) {
      s.desc_act = ao->get<bool>();
    } else if (a == "group" || a == "dynamic") {
      s.desc_act = true;
    } else if (a != "weight" && a != "static") {
      return ww.invalid("actorder", *ao, "expected group, weight or null");
    }
  }

  if (format == "pack-quantized") {
    if (type != "int") return ww.invalid("type", type, "pack-quantized holds int weights");
    if (strategy != "group" && strategy != "channel") {
      return ww.unsupported("strategy", strategy,
                            "pack-quantized weights are supported per group or channel");
    }
    s.layout = Layout::kCtPacked;
  } else if (format == "int-quantized" || format == "naive-quantized") {
    if (type == "int") {
      if (strategy == "block") {
        return ww.unsupported("strategy", strategy, "int weights are not supported per block");
      }
      s.layout = Layout::kCtInt;
    } else {
      s.layout = Layout::kFp8;
    }
  } else if (format == "float-quantized") {
    if (type != "float") return ww.invalid("type", type, "float-quantized holds float weights");
    s.layout = Layout::kFp8;
  } else {
    return w.unsupported("format", format,
                         "unsupported compressed-tensors format (supported: pack-quantized, "
                         "int-quantized, naive-quantized, float-quantized)");
  }
  if (s.layout == Layout::kFp8 && s.bits != 8) {
    return ww.unsupported("num_bits", s.bits, "only 8-bit (fp8 e4m3) float weights are supported");
  }
  if (s.layout != Layout::kCtInt && s.layout != Layout::kFp8 && strategy == "tensor") {
    return ww.unsupported("strategy", strategy, "not supported for " + format);
  }
  QS_RETURN_IF_ERROR(
      validate(s, ww, "num_bits", strategy == "block" ? "block_structure" : "group_size"));
  return s;
}

Status parse_compressed_tensors(const json& qc, const Where& w, Parsed* p) {
  QS_ASSIGN_OR_RETURN(std::string status, get_string(qc, w, "quantization_status", "compressed"));
  if (lower(status) != "compressed") {
    return w.unsupported("quantization_status", status,
                         "the weights are not compressed (a fake-quantized or in-training "
                         "export); only \"compressed\" checkpoints can be served");
  }
  if (const json* sc = find(qc, "sparsity_config"); sc && sc->is_object()) {
    QS_ASSIGN_OR_RETURN(std::string sf,
                        get_string(*sc, w.at(".sparsity_config"), "format", "dense"));
    if (lower(sf) != "dense") {
      return w.at(".sparsity_config")
          .unsupported("format", sf, "sparse compressed-tensors checkpoints are not supported");
    }
  }
  QS_ASSIGN_OR_RETURN(std::string top_format, get_string(qc, w, "format", ""));
  top_format = lower(top_format);
  const json* groups = find(qc, "config_groups");
  if (!groups || !groups->is_object() || groups->empty()) {
    return w.invalid("config_groups", groups ? *groups : json(nullptr),
                     "expected an object with at least one quantization group");
  }

  struct Target {
    std::string text;
    QuantScheme scheme;
  };
  std::vector<Target> by_name, by_class;
  bool have_default = false;
  for (const auto& [gname, group] : groups->items()) {
    const Where gw = w.at(".config_groups." + gname);
    if (!group.is_object()) return gw.invalid("", group, "expected an object");
    QS_ASSIGN_OR_RETURN(std::string format, get_string(group, gw, "format", top_format));
    format = lower(format);
    if (format.empty()) {
      return w.missing("format", "compressed-tensors names its storage format");
    }
    QuantScheme s;
    if (const json* wa = find(group, "weights")) {
      QS_ASSIGN_OR_RETURN(s, ct_weights(*wa, format, find(group, "format") ? gw : w));
    }
    if (!have_default && s.quantized()) {
      p->dflt = s;
      p->format = format;
      have_default = true;
    }
    for (const char* acts : {"input_activations", "output_activations"}) {
      if (const json* a = find(group, acts)) {
        p->notes.push_back(gname + " also quantizes " + acts + " (" + a->dump() +
                           "); we run the weights with f32 activations");
      }
    }
    QS_ASSIGN_OR_RETURN(auto targets, get_strings(group, gw, "targets"));
    if (targets.empty()) return gw.missing("targets", "a group names the modules it quantizes");
    for (const auto& t : targets) {
      by_name.push_back({t, s});
      // vLLM matches a plain target against the class name too, as a case-insensitive
      // substring: "Linear" selects every linear module (the only modules we ask about).
      if (t.rfind("re:", 0) != 0 && !t.empty() && contains("linear", lower(t))) {
        by_class.push_back({t, s});
      }
    }
  }
  if (!have_default) {
    return w.invalid("config_groups", *groups, "no group quantizes weights");
  }
  if (find(qc, "kv_cache_scheme")) {
    p->notes.push_back("kv_cache_scheme is set; the KV cache ignores it");
  }

  auto add_target = [&](const std::string& t, const QuantScheme& s, const Where& tw,
                        const char* what) -> Status {
    if (t.rfind("re:", 0) == 0) {
      QS_ASSIGN_OR_RETURN(std::regex re, compile(t.substr(3), tw, what));
      p->add(Match::kMatchStart, t.substr(3), s, std::move(re));
    } else {
      p->add(Match::kExact, t, s);
    }
    return ok_status();
  };
  QS_ASSIGN_OR_RETURN(auto ignore, get_strings(qc, w, "ignore"));
  for (const auto& t : ignore) {
    QS_RETURN_IF_ERROR(add_target(t, QuantScheme{}, w, "ignore"));
    if (t.rfind("re:", 0) != 0 && contains("linear", lower(t))) {
      p->add(Match::kAny, t, QuantScheme{});
    }
  }
  for (const auto& t : by_name) QS_RETURN_IF_ERROR(add_target(t.text, t.scheme, w, "targets"));
  for (const auto& t : by_class) p->add(Match::kAny, t.text, t.scheme);
  p->add(Match::kAny, "", QuantScheme{});  // not targeted by any group: dense
  return ok_status();
}

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
  for (const auto& rule : rules_) {
    if (rule->matches(module)) return rule->scheme;
  }
  return default_;
}

std::string QuantConfig::summary() const {
  if (!quantized()) return "not quantized";
  std::string out = method_;
  if (!format_.empty()) out += " (" + format_ + ")";
  out += " " + scheme_text(default_) + ", from " + source_;
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
