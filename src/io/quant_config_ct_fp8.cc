// io: quantization detection of the float-capable methods: compressed-tensors (config_groups
// with targets / ignore as vLLM and compressed-tensors match them, per-group formats and
// strategies) and fp8 (HF FineGrainedFP8 / DeepSeek block scales, AutoFP8 per-tensor). Each
// fills a detail::Parsed for parse_quant_config.
#include <cinttypes>
#include <cstdio>

#include "io/quant_config_rules.h"

namespace qs::io::detail {

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
  // vLLM's Fp8LinearMethod: static is the per-tensor input_scale of each layer; dynamic is
  // per token group of block_k for block checkpoints, else one scale per call or per token
  // depending on the GPU kernel. We take per token: finer, and a request's result does not
  // depend on the requests batched with it.
  d.act.type = formats::ActType::kFp8;
  d.act.dynamic = act == "dynamic";
  d.act.strategy = d.act.dynamic ? formats::ActStrategy::kToken : formats::ActStrategy::kTensor;
  if (d.act.dynamic && d.block_k > 0) {
    d.act.strategy = formats::ActStrategy::kGroup;
    d.act.group_size = d.block_k;
  }
  p->notes.push_back("activation_scheme " + act + ": activations " + d.act.describe() +
                     (d.act.dynamic ? "" : ", from each layer's input_scale"));
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

namespace {

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

// The scheme of one config group's `input_activations` args.
Result<formats::ActScheme> ct_acts(const json& aa, const Where& w,
                                   std::vector<std::string>* notes) {
  if (!aa.is_object()) return w.invalid("input_activations", aa, "expected an object");
  const Where aw = w.at(".input_activations");
  formats::ActScheme a;
  QS_ASSIGN_OR_RETURN(int bits, get_bits(aa, aw, "num_bits", 8));
  QS_ASSIGN_OR_RETURN(std::string type, get_string(aa, aw, "type", "int"));
  type = lower(type);
  if (bits != 8 || (type != "int" && type != "float")) {
    return aw.unsupported("num_bits", bits,
                          "activations are supported as 8-bit int or float (fp8 e4m3), not " +
                              std::to_string(bits) + "-bit " + type);
  }
  a.type = type == "int" ? formats::ActType::kInt8 : formats::ActType::kFp8;
  if (const json* dyn = find(aa, "dynamic")) {
    if (!dyn->is_boolean()) {
      return aw.unsupported("dynamic", *dyn, "expected true (scales per call) or false (static)");
    }
    a.dynamic = dyn->get<bool>();
  } else {
    a.dynamic = false;  // compressed-tensors' QuantizationArgs default
  }
  QS_ASSIGN_OR_RETURN(a.sym, get_bool(aa, aw, "symmetric", true));
  if (!a.sym && a.type == formats::ActType::kFp8) {
    return aw.unsupported("symmetric", false, "fp8 activations have no zero point");
  }
  const json* g = find(aa, "group_size");
  std::string strategy;
  if (find(aa, "strategy")) {
    QS_ASSIGN_OR_RETURN(strategy, get_string(aa, aw, "strategy", ""));
    strategy = lower(strategy);
  } else {
    strategy = g && g->is_number_integer() && g->get<int64_t>() > 0 ? "group" : "tensor";
  }
  if (strategy == "token") {
    a.strategy = formats::ActStrategy::kToken;
  } else if (strategy == "tensor") {
    a.strategy = formats::ActStrategy::kTensor;
  } else if (strategy == "group") {
    a.strategy = formats::ActStrategy::kGroup;
    if (g) {
      QS_ASSIGN_OR_RETURN(a.group_size, as_int(*g, aw, "group_size"));
    }
    if (a.group_size <= 0) {
      return aw.invalid("group_size", g ? *g : json(nullptr),
                        "strategy group needs a positive group_size");
    }
  } else {
    return aw.unsupported("strategy", strategy,
                          "activations are quantized per token, tensor or group");
  }
  if (!a.dynamic && a.strategy != formats::ActStrategy::kTensor) {
    return aw.unsupported("strategy", strategy,
                          "static activation scales are supported per tensor only");
  }
  if (a.dynamic && a.strategy == formats::ActStrategy::kTensor) {
    // One scale over the whole call would make a request's result depend on the requests
    // batched with it; per token is as fine or finer everywhere.
    a.strategy = formats::ActStrategy::kToken;
    notes->push_back(aw.name("strategy") +
                     " = tensor with dynamic scales: run per token (batch-invariant)");
  }
  return a;
}

}  // namespace

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
    if (const json* a = find(group, "input_activations"); a != nullptr && !a->is_null()) {
      if (s.quantized()) {
        QS_ASSIGN_OR_RETURN(s.act, ct_acts(*a, gw, &p->notes));
        p->notes.push_back(gname + " quantizes input_activations: " + s.act.describe());
      }
    }
    if (!have_default && s.quantized()) {
      p->dflt = s;
      p->format = format;
      have_default = true;
    }
    if (const json* a = find(group, "output_activations"); a != nullptr && !a->is_null()) {
      p->notes.push_back(gname + " also quantizes output_activations (" + a->dump() +
                         "); outputs are kept in f32");
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
  if (const json* kv = find(qc, "kv_cache_scheme"); kv != nullptr && !kv->is_null()) {
    // As in vLLM, the scheme's k/v scales (k_proj/v_proj.output_scale, models/kv_scales.h)
    // apply only to a cache the user asks to be fp8; an auto cache keeps f32 K/V.
    p->notes.push_back("kv_cache_scheme is set; its k/v scales are used with --kv-cache-dtype fp8");
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

}  // namespace qs::io::detail
