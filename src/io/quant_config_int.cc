// io: quantization detection of the int methods whose tensors follow GPTQ or AWQ: AutoRound
// (packing formats, extra_config, block_name_to_quantize), GPTQ (checkpoint_format, GPTQModel
// `dynamic`, modules_in_block_to_quantize, lm_head) and AWQ (GEMM version,
// modules_to_not_convert). Each fills a detail::Parsed for parse_quant_config.
#include <algorithm>
#include <sstream>

#include "io/quant_config_rules.h"

namespace qs::io::detail {
namespace {

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
// list (possibly nested) of block-list prefixes; empty when the config names none.
Result<std::vector<std::string>> autoround_blocks(const json& qc, const Where& w) {
  std::string key = "block_name_to_quantize";
  const json* v = find(qc, key);
  if (!v) {
    key = "to_quant_block_names";
    v = find(qc, key);
  }
  if (!v) return std::vector<std::string>{};
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

}  // namespace

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
  if (blocks.empty()) {
    // Pure-LLM exports may omit the key and AutoRound's loader then finds the block lists
    // itself; the decoder blocks we load are "<prefix>.layers.<i>" (model.layers.0,
    // model.language_model.layers.0).
    p->add(Match::kSearch, "layers.<i>", d, std::regex("(^|\\.)layers\\.[0-9]+\\."));
  }
  p->add(Match::kAny, "", QuantScheme{});  // lm_head and everything outside the blocks
  return ok_status();
}

// ---------------------------------------------------------------------------------------------
// GPTQ (AutoGPTQ / GPTQModel; vllm-serving.md §2.1)

namespace {

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

}  // namespace

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

}  // namespace qs::io::detail
