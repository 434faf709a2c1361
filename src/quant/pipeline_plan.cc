// quant: which linears are quantized and how, and the quantization_config that says so
// (see pipeline.h).
#include <filesystem>
#include <regex>
#include <set>

#include "quant/pipeline.h"

namespace qs::quant {

namespace {

using nlohmann::json;

// One layer_config entry applied to `spec`: a scheme string or an object of overrides.
// Returns false in *quantize when the entry asks for 16 bits.
Status apply_override(const std::string& key, const json& value, io::IntQuantSpec* spec,
                      bool* quantize) {
  const std::string where = "--layer_config '" + key + "'";
  if (value.is_string()) {
    const std::string s = value.get<std::string>();
    if (s == "BF16" || s == "FP16" || s == "16") {
      *quantize = false;
      return ok_status();
    }
    Result<io::IntQuantSpec> parsed = parse_scheme(s);
    if (!parsed.ok()) return parsed.status().with_context(where);
    *spec = *parsed;
    return ok_status();
  }
  if (!value.is_object()) return invalid_argument(where + ": expected a scheme name or an object");
  for (const auto& [field, v] : value.items()) {
    if (field == "bits" && v.is_number_integer()) {
      const int64_t bits = v.get<int64_t>();
      if (bits >= 16) {
        *quantize = false;
      } else if (bits == 2 || bits == 3 || bits == 4 || bits == 8) {
        spec->bits = static_cast<int>(bits);
      } else {
        return invalid_argument(where + ": bits " + std::to_string(bits) +
                                " is not supported (2, 3, 4, 8 or 16)");
      }
    } else if (field == "group_size" && v.is_number_integer()) {
      spec->group_size = v.get<int64_t>();
      if (spec->group_size == 0 || spec->group_size < -1) {
        return invalid_argument(where + ": group_size must be positive or -1");
      }
    } else if (field == "sym" && v.is_boolean()) {
      spec->sym = v.get<bool>();
    } else if (field == "data_type" && v.is_string()) {
      const std::string dt = v.get<std::string>();
      if (dt == "fp" || dt == "float") {
        *quantize = false;
      } else if (dt != "int") {
        return invalid_argument(where + ": data_type '" + dt + "' is not supported (int, fp)");
      }
    } else {
      return invalid_argument(where + ": unknown or mistyped key '" + field + "': " + v.dump());
    }
  }
  return ok_status();
}

// The layer_config key that applies to `module`: an exact name, else the first key (sorted)
// whose regex is found in the name. "" when none.
Result<std::string> matching_key(const json& layer_config, const std::string& module) {
  if (layer_config.contains(module)) return module;
  for (const auto& [key, value] : layer_config.items()) {
    try {
      if (std::regex_search(module, std::regex(key))) return key;
    } catch (const std::regex_error& e) {
      return invalid_argument("--layer_config key '" + key + "' is not a valid regex: " + e.what());
    }
  }
  return std::string();
}

json spec_keys(const io::IntQuantSpec& s) {
  return {{"bits", s.bits}, {"group_size", s.group_size}, {"sym", s.sym}, {"data_type", "int"}};
}

// Writes the layers that differ from the default into the format's own exception lists,
// beyond the 16-bit ones make_quantization_config already lists.
Status add_exceptions(io::ExportFormat format, const io::IntQuantSpec& global,
                      const std::vector<LayerPlan>& layers, json* qc) {
  for (const LayerPlan& l : layers) {
    if (!l.quantize) continue;
    const bool differs = l.spec.bits != global.bits || l.spec.group_size != global.group_size ||
                         l.spec.sym != global.sym;
    const bool is_head = l.module == "lm_head";
    if (!differs && !is_head) continue;
    switch (format) {
      case io::ExportFormat::kAutoRound: {
        // A quantized lm_head lists every scheme key (§3.5); other layers only what differs.
        json keys = json::object();
        const json all = spec_keys(l.spec);
        const json base = spec_keys(global);
        for (const auto& [k, v] : all.items()) {
          if (is_head || base[k] != v) keys[k] = v;
        }
        (*qc)["extra_config"][l.module] = keys;
        break;
      }
      case io::ExportFormat::kAutoGptq:
        if (differs) {
          return invalid_argument(l.module +
                                  ": per-layer schemes are written for --format "
                                  "auto_round only (auto_gptq: 16-bit exceptions only)");
        }
        (*qc)["lm_head"] = true;
        break;
      case io::ExportFormat::kAutoAwq:
      case io::ExportFormat::kCompressedTensors: {
        if (differs) {
          return invalid_argument(l.module +
                                  ": per-layer schemes are written for --format "
                                  "auto_round only (" +
                                  io::export_format_name(format) + ": 16-bit exceptions only)");
        }
        const char* list =
            format == io::ExportFormat::kAutoAwq ? "modules_to_not_convert" : "ignore";
        json kept = json::array();
        for (const json& m : (*qc)[list]) {
          if (m != "lm_head") kept.push_back(m);
        }
        (*qc)[list] = kept;
        break;
      }
    }
  }
  return ok_status();
}

}  // namespace

Result<io::IntQuantSpec> parse_scheme(const std::string& name) {
  io::IntQuantSpec spec;  // int, group 128, sym: every W*A16 preset of §1.8
  if (name == "W4A16")
    spec.bits = 4;
  else if (name == "W8A16")
    spec.bits = 8;
  else if (name == "W3A16")
    spec.bits = 3;
  else if (name == "W2A16")
    spec.bits = 2;
  else if (name == "FP8_DYNAMIC" || name == "FP8_BLOCK" || name == "W8A8")
    // llm-compressor's presets, which its QuantizationModifier applies by RTN (minmax scales).
    return io::parse_int_quant_spec(name == "W8A8"          ? "w8a8"
                                    : name == "FP8_DYNAMIC" ? "fp8"
                                                            : "fp8-block");
  else {
    return invalid_argument("unsupported scheme '" + name +
                            "' (W4A16, W8A16, W3A16, W2A16; RTN only: W8A8, FP8_DYNAMIC, "
                            "FP8_BLOCK)");
  }
  return spec;
}

Status check_options(const QuantizeOptions& o) {
  const io::IntQuantSpec& s = o.spec;
  if (s.bits != 2 && s.bits != 3 && s.bits != 4 && s.bits != 8) {
    return invalid_argument("--bits " + std::to_string(s.bits) + " is not supported (2, 3, 4, 8)");
  }
  if ((s.group_size == 0 && s.block == 0) || s.group_size < -1) {
    return invalid_argument("--group_size must be positive or -1 (per channel), got " +
                            std::to_string(s.group_size));
  }
  if (o.format == io::ExportFormat::kAutoAwq && s.bits != 4) {
    return invalid_argument("--format auto_awq stores 4-bit weights only, not " +
                            std::to_string(s.bits));
  }
  if (o.iters < 0) return invalid_argument("--iters must be >= 0");
  if (s.needs_compressed_tensors()) {
    // Tuning rounding offsets is defined for integer weights with 16-bit activations.
    if (o.iters > 0 || !o.disable_opt_rtn) {
      return invalid_argument(
          "the W8A8 / FP8 schemes are RTN (as llm-compressor's QuantizationModifier): pass "
          "--iters 0 --disable_opt_rtn");
    }
    if (o.format != io::ExportFormat::kCompressedTensors) {
      return invalid_argument(
          "the W8A8 / FP8 schemes are written as compressed-tensors only: --format "
          "llm_compressor");
    }
  }
  if (o.nsamples < 1 || o.seqlen < 2 || o.batch_size < 1) {
    return invalid_argument("--nsamples, --batch_size must be >= 1 and --seqlen >= 2");
  }
  namespace fs = std::filesystem;
  if (o.output_dir.empty()) return invalid_argument("--output_dir is required");
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(o.output_dir, ec);
  if (!ec && out == fs::weakly_canonical(o.model_dir, ec)) {
    return invalid_argument("--output_dir is the source model directory");
  }
  if (fs::exists(o.output_dir, ec) && !o.overwrite) {
    return invalid_argument("--output_dir " + o.output_dir +
                            " already exists; pass --overwrite to replace it");
  }
  return ok_status();
}

PlanTarget decoder_target(const models::ModelConfig& config) {
  PlanTarget target;
  target.tied_head = config.tie_word_embeddings;
  target.vocab_size = config.vocab_size;
  target.hidden_size = config.hidden_size;
  for (const models::TensorSpec& t : models::expected_tensors(config)) {
    if (!t.linear) continue;  // the embedding, norms, MoE routers and shared-expert gates
    target.linears.push_back({t.name.substr(0, t.name.size() - 7), t.shape[0], t.shape[1]});
  }
  return target;
}

Result<QuantPlan> plan_quantization(const QuantizeOptions& o, const models::ModelConfig& config) {
  return plan_quantization(o, decoder_target(config));
}

Result<QuantPlan> plan_quantization(const QuantizeOptions& o, const PlanTarget& target) {
  if (!o.layer_config.is_object()) {
    return invalid_argument("--layer_config must be a JSON object of name -> scheme");
  }
  if (o.quant_lm_head && target.tied_head) {
    return invalid_argument(
        "--quant_lm_head: lm_head is tied to the embeddings "
        "(tie_word_embeddings), which stay 16-bit");
  }
  const auto in_a_block = [&](const std::string& module) {
    for (const std::string& b : target.blocks) {
      if (module.rfind(b + ".", 0) == 0) return true;
    }
    return false;
  };
  QuantPlan plan;
  if (target.tied_head) {
    // No tensor of its own; listed so the summary says why it is not quantized.
    LayerPlan head;
    head.module = "lm_head";
    head.n = target.vocab_size;
    head.k = target.hidden_size;
    head.reason = "tied to the embeddings";
    plan.layers.push_back(head);
  }
  std::set<std::string> used_keys;
  bool group_fits = o.spec.group_size < 0 || o.spec.block > 0;  // blocks cover any shape
  for (const LinearSite& t : target.linears) {
    LayerPlan l;
    l.module = t.module;
    l.n = t.n;
    l.k = t.k;
    l.spec = o.spec;
    l.quantize = true;
    const bool in_block = in_a_block(l.module);
    if (l.module == "lm_head") {
      if (!o.quant_lm_head) {
        l.quantize = false;
        l.reason = "lm_head (pass --quant_lm_head)";
      } else if (target.tied_head) {
        return invalid_argument(
            "--quant_lm_head: lm_head is tied to the embeddings "
            "(tie_word_embeddings), which stay 16-bit");
      }
    } else if (!in_block) {
      l.quantize = false;
      l.reason = "outside the blocks";
    }
    QS_ASSIGN_OR_RETURN(std::string key, matching_key(o.layer_config, l.module));
    if (!key.empty() && l.quantize) {
      used_keys.insert(key);
      QS_RETURN_IF_ERROR(apply_override(key, o.layer_config[key], &l.spec, &l.quantize));
      if (!l.quantize) l.reason = "--layer_config '" + key + "'";
    }
    if (l.quantize && !io::int_packable(l.n, l.k)) {
      l.quantize = false;
      l.reason =
          "shape [" + std::to_string(l.n) + ", " + std::to_string(l.k) + "] not a multiple of 32";
    }
    const bool awq = o.format == io::ExportFormat::kAutoAwq;
    if (l.quantize && l.spec.group_size > 0 && (awq || target.whole_groups) &&
        l.k % l.spec.group_size != 0) {
      l.quantize = false;
      l.reason = "in_features " + std::to_string(l.k) + " not a multiple of group_size " +
                 std::to_string(l.spec.group_size) + (awq ? " (AWQ)" : "");
    }
    if (l.quantize && (l.spec.group_size <= 0 || l.k % l.spec.group_size == 0)) group_fits = true;
    plan.layers.push_back(std::move(l));
  }
  for (const auto& [key, value] : o.layer_config.items()) {
    if (!used_keys.count(key)) {
      return invalid_argument("--layer_config '" + key + "' matches no quantizable layer");
    }
  }
  // Nothing left to quantize is its own mistake (a model too narrow for the packed formats, a
  // layer_config that keeps everything): name it with a layer's reason, not the group size.
  const auto to_quantize = std::find_if(plan.layers.begin(), plan.layers.end(),
                                        [](const LayerPlan& l) { return l.quantize; });
  if (to_quantize == plan.layers.end()) {
    const auto kept_in_block =
        std::find_if(plan.layers.begin(), plan.layers.end(),
                     [&](const LayerPlan& l) { return in_a_block(l.module); });
    const bool by_group = kept_in_block != plan.layers.end() &&
                          kept_in_block->reason.find("group_size") != std::string::npos;
    if (!by_group) {
      return invalid_argument(
          "no layer is left to quantize" +
          (kept_in_block != plan.layers.end()
               ? " (" + kept_in_block->module + ": " + kept_in_block->reason + ", and so on)"
               : std::string(" (no linear inside the blocks)")));
    }
  }
  if (!group_fits) {
    return invalid_argument("--group_size " + std::to_string(o.spec.group_size) +
                            " divides the input size of no layer to quantize");
  }
  std::vector<std::string> dense;
  for (const LayerPlan& l : plan.layers) {
    if (!l.quantize && l.module != "lm_head" && in_a_block(l.module)) dense.push_back(l.module);
  }
  QS_ASSIGN_OR_RETURN(plan.quantization_config,
                      io::make_quantization_config(o.format, o.spec, dense, target.blocks));
  QS_RETURN_IF_ERROR(add_exceptions(o.format, o.spec, plan.layers, &plan.quantization_config));
  for (const std::string& module : target.listed_16bit) {
    plan.quantization_config["extra_config"][module] = {{"bits", 16},
                                                        {"data_type", target.listed_data_type}};
  }
  if (o.format == io::ExportFormat::kAutoRound) {
    json& qc = plan.quantization_config;
    if (o.iters == 0 && o.disable_opt_rtn) qc["model_free"] = true;  // §3.5: model-free mode
    // §3.5: tuning hyperparameters only where they differ from the tool's defaults (iters 0
    // marks RTN / OPT-RTN). nsamples, seqlen and batch_size never: auto-round 0.16 keeps them in
    // its calibration context, which its serializer does not read (its checkpoints in
    // tests/golden/fixtures/quant and vl_autoround carry none of them).
    if (o.iters != 200) qc["iters"] = o.iters;
    if ((o.iters > 0 || !o.disable_opt_rtn) && !o.amp) qc["amp"] = false;
    if (o.iters > 0) {
      if (o.gradient_accumulate_steps != 1) {
        qc["gradient_accumulate_steps"] = o.gradient_accumulate_steps;
      }
      if (o.lr > 0) qc["lr"] = o.lr;
      if (o.minmax_lr > 0) qc["minmax_lr"] = o.minmax_lr;
    }
  }
  QS_ASSIGN_OR_RETURN(plan.parsed,
                      io::parse_quant_config(plan.quantization_config, "quantization_config"));
  // What readers detect must be what is stored, layer by layer.
  for (const LayerPlan& l : plan.layers) {
    const formats::QuantScheme s = plan.parsed.scheme_for(l.module);
    const bool same = s.quantized() == l.quantize &&
                      (!l.quantize || (s.bits == l.spec.bits && s.sym == l.spec.sym &&
                                       s.group_size == l.spec.group_size));
    if (!same) {
      return internal_error("the quantization_config written for " + l.module + " reads back as " +
                            s.describe() + ", not what was planned");
    }
  }
  return plan;
}

}  // namespace qs::quant
