// apps: `quantserve make-model`: writes a random-weight Hugging Face checkpoint at the real
// shapes of a known model (or of a given config.json), for benchmarks and kernel tests that
// need realistic sizes but no trained weights. The tensor list comes from the model family's
// own declaration, so what this writes is exactly what the loader expects. With --quantize
// the block linears are RTN-quantized and packed into a real AutoRound / GPTQ / AWQ /
// compressed-tensors checkpoint (lm_head and embeddings stay in the model dtype, as
// AutoRound leaves them). A vision-language or Omni preset also gets its towers (16-bit in
// both forms, as AutoRound leaves them) and its preprocessor_config.json.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>

#include "apps/commands.h"
#include "apps/flags.h"
#include "core/json.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"
#include "io/quant_export.h"
#include "models/model_config.h"
#include "models/model_presets.h"
#include "models/tower_tensors.h"
#include "quant/rtn_pack.h"

namespace qs::apps {
namespace {

// splitmix64: cheap, good enough for weights nobody trains, and stable across platforms so a
// seed always gives the same checkpoint.
struct SplitMix {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float uniform() {
    return static_cast<float>(static_cast<int64_t>(next() >> 11) - (1ll << 52)) * 0x1p-52f;
  }
};

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

Result<DType> parse_weight_dtype(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "f16" || s == "float16" || s == "half") return DType::kF16;
  if (s == "f32" || s == "float32" || s == "float") return DType::kF32;
  return invalid_argument("--dtype must be bf16, f16 or f32, got '" + s + "'");
}

const char* torch_dtype_name(DType t) {
  return t == DType::kBF16 ? "bfloat16" : t == DType::kF16 ? "float16" : "float32";
}

// A norm's scale: the decoder's "*norm.weight", the towers' "norm1.weight", "ln_q.weight",
// "ln_post.weight" (1-D, so no matmul weight matches).
bool is_norm_weight(const models::TensorSpec& spec) {
  const std::string& n = spec.name;
  return spec.shape.size() == 1 && n.ends_with(".weight") &&
         (n.find("norm") != std::string::npos || n.find(".ln_") != std::string::npos);
}

// Norm weights start at one (as HF initialises them); everything else is uniform with the
// standard deviation HF uses for initializer_range (0.02), so activations stay finite.
Tensor random_tensor(const models::TensorSpec& spec, DType dtype, uint64_t seed) {
  Tensor t = Tensor::zeros(dtype, spec.shape);
  const bool is_norm = is_norm_weight(spec);
  SplitMix rng{seed ^ hash_name(spec.name)};
  const float amplitude = 0.02f * std::sqrt(3.0f);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = is_norm ? 1.0f : amplitude * rng.uniform();
    switch (dtype) {
      case DType::kBF16:
        t.mutable_ptr<uint16_t>()[i] = f32_to_bf16(v);
        break;
      case DType::kF16:
        t.mutable_ptr<uint16_t>()[i] = f32_to_f16(v);
        break;
      default:
        t.mutable_ptr<float>()[i] = v;
        break;
    }
  }
  return t;
}

// The matmul weights of the tensor list (not the embedding, norms, MoE routers or
// shared-expert gates, which stay 16-bit in quantized checkpoints too).
bool is_linear_weight(const models::TensorSpec& spec) {
  return spec.linear;
}

std::string module_of(const models::TensorSpec& spec) {
  return spec.name.substr(0, spec.name.size() - std::string(".weight").size());
}

// AutoRound quantizes the linears of the decoder blocks (block_name_to_quantize).
bool in_quantized_block(const std::string& module) {
  return module.rfind("model.layers.", 0) == 0;
}

// What --quantize asks for, once its config has been written and read back.
struct QuantPlan {
  io::IntQuantSpec spec;
  io::ExportFormat format;
  nlohmann::json config;               // quantization_config as written
  io::QuantConfig parsed;              // the same, as every reader will detect it
  std::set<std::string> dense_blocks;  // block linears AutoRound keeps 16-bit (not 32-aligned)
};

Result<std::optional<QuantPlan>> plan_quantization(const Flags& flags,
                                                   const std::vector<models::TensorSpec>& specs) {
  if (!flags.has("quantize")) {
    if (flags.has("format")) return invalid_argument("--format needs --quantize SCHEME");
    return std::optional<QuantPlan>();
  }
  QuantPlan plan;
  QS_ASSIGN_OR_RETURN(plan.spec, io::parse_int_quant_spec(flags.get("quantize")));
  QS_ASSIGN_OR_RETURN(plan.format, io::parse_export_format(flags.get("format")));
  if (plan.spec.needs_compressed_tensors() && !flags.has("format")) {
    plan.format = io::ExportFormat::kCompressedTensors;  // the only format that holds them
  }
  for (const auto& spec : specs) {
    if (!is_linear_weight(spec) || !in_quantized_block(module_of(spec))) continue;
    if (!io::int_packable(spec.shape[0], spec.shape[1])) plan.dense_blocks.insert(module_of(spec));
  }
  const std::vector<std::string> dense(plan.dense_blocks.begin(), plan.dense_blocks.end());
  QS_ASSIGN_OR_RETURN(plan.config, io::make_quantization_config(plan.format, plan.spec, dense));
  QS_ASSIGN_OR_RETURN(plan.parsed, io::parse_quant_config(plan.config, "quantization_config"));
  return std::optional<QuantPlan>(std::move(plan));
}

Status make_model(const Flags& flags) {
  nlohmann::json config;
  if (flags.has("like") == flags.has("config")) {
    return invalid_argument("give exactly one of --like NAME or --config FILE");
  }
  if (flags.has("like")) {
    QS_ASSIGN_OR_RETURN(config, models::model_preset(flags.get("like")));
  } else {
    QS_ASSIGN_OR_RETURN(config, read_json(flags.get("config")));
  }
  if (!flags.has("out")) return invalid_argument("--out DIR is required");
  if (flags.has("layers")) {
    QS_ASSIGN_OR_RETURN(int64_t layers, flags.get_int("layers"));
    if (layers < 1) return invalid_argument("--layers must be at least 1");
    // The decoder's own field: under text_config where the config nests it (Omni's thinker).
    nlohmann::json& text = config.contains("text_config") && config["text_config"].is_object()
                               ? config["text_config"]
                               : config;
    text["num_hidden_layers"] = layers;
    // An explicit per-layer list would no longer match the count.
    text.erase("layer_types");
  }
  std::string dtype_flag = flags.get("dtype");
  if (dtype_flag.empty()) dtype_flag = json_string_or(config, "torch_dtype", "bfloat16");
  QS_ASSIGN_OR_RETURN(DType dtype, parse_weight_dtype(dtype_flag));
  config["torch_dtype"] = torch_dtype_name(dtype);
  QS_ASSIGN_OR_RETURN(uint64_t seed_signed, flags.get_int("seed"));
  const uint64_t seed = seed_signed;

  QS_ASSIGN_OR_RETURN(models::ModelConfig parsed, models::parse_model_config(config));
  std::vector<models::TensorSpec> specs = models::expected_tensors(parsed);
  QS_ASSIGN_OR_RETURN(std::optional<QuantPlan> plan, plan_quantization(flags, specs));
  // After the plan: the towers' linears are not the decoder blocks', so they stay 16-bit.
  QS_ASSIGN_OR_RETURN(const std::vector<models::TensorSpec> towers,
                      models::tower_tensors(config, parsed));
  specs.insert(specs.end(), towers.begin(), towers.end());
  nlohmann::json preprocessor;
  if (flags.has("like")) {
    QS_ASSIGN_OR_RETURN(preprocessor, models::model_preset_preprocessor(flags.get("like")));
  }
  const std::string out = flags.get("out");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return io_error("cannot create " + out + ": " + ec.message());

  std::vector<std::pair<std::string, Tensor>> tensors;
  int64_t n_quantized = 0;
  for (const auto& spec : specs) {
    // The same random values with or without --quantize: a quantized checkpoint is the RTN
    // version of the unquantized one of the same seed.
    Tensor t = random_tensor(spec, dtype, seed);
    const bool linear = is_linear_weight(spec);
    const std::string module = linear ? module_of(spec) : "";
    const bool quantize =
        plan && linear && in_quantized_block(module) && plan->dense_blocks.count(module) == 0;
    if (plan && linear) {
      // What readers will detect must be what is stored, layer by layer.
      const formats::QuantScheme scheme = plan->parsed.scheme_for(module);
      if (scheme.quantized() != quantize) {
        return internal_error("the quantization_config written for " + module + " reads back as " +
                              scheme.describe() + ", but the layer is " +
                              (quantize ? "quantized" : "kept 16-bit"));
      }
      if (quantize) {
        QS_RETURN_IF_ERROR(quant::rtn_quantize_and_pack(module, scheme, plan->format, t.to_f32(),
                                                        spec.shape[0], spec.shape[1], &tensors));
        ++n_quantized;
        continue;
      }
    }
    tensors.emplace_back(spec.name, std::move(t));
  }
  uint64_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += t.nbytes();
  if (plan) {
    // As auto-round: in config.json and, the same dict, in quantization_config.json.
    config["quantization_config"] = plan->config;
    QS_RETURN_IF_ERROR(write_json(out + "/quantization_config.json", plan->config));
  } else {
    // A directory reused for an unquantized model must not keep an older side file, which
    // detection would read as this checkpoint's quantization.
    std::filesystem::remove(out + "/quantization_config.json", ec);
  }
  QS_RETURN_IF_ERROR(write_json(out + "/config.json", config));
  if (!preprocessor.is_null()) {
    QS_RETURN_IF_ERROR(write_json(out + "/preprocessor_config.json", preprocessor));
  }
  nlohmann::json gen = {{"_from_model_config", true}};
  if (config.contains("bos_token_id")) gen["bos_token_id"] = config["bos_token_id"];
  if (config.contains("eos_token_id")) gen["eos_token_id"] = config["eos_token_id"];
  QS_RETURN_IF_ERROR(write_json(out + "/generation_config.json", gen));
  QS_RETURN_IF_ERROR(
      io::write_safetensors(out + "/model.safetensors", tensors, {{"format", "pt"}}));
  std::string quant_note;
  if (plan) {
    quant_note = ", " + io::int_quant_spec_name(plan->spec) + " RTN as " +
                 io::export_format_name(plan->format) + ": " + std::to_string(n_quantized) +
                 " linears quantized, " + std::to_string(plan->dense_blocks.size()) +
                 " block linears kept 16-bit (not multiples of 32)";
  }
  if (!towers.empty()) {
    quant_note += ", " + std::to_string(towers.size()) + " tower tensors (16-bit)";
  }
  std::fprintf(stderr, "make-model: wrote %s (%s, %zu tensors, %.1f MiB, random weights%s)\n",
               out.c_str(), parsed.architecture.c_str(), tensors.size(), bytes / 1048576.0,
               quant_note.c_str());
  return ok_status();
}

}  // namespace

int cmd_make_model(const Args& args) {
  Flags flags;
  std::string presets;
  for (const auto& n : models::model_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  flags.add("like", "model whose shapes to copy: " + presets)
      .add("config", "a config.json to use instead of a preset")
      .add("out", "output directory")
      .add("dtype", "weight dtype: bf16, f16 or f32 (default: the config's torch_dtype)")
      .add("layers", "override num_hidden_layers (smaller checkpoints for quick runs)")
      .add("seed", "random seed", false, "0")
      .add(
          "quantize",
          "RTN-quantize the block linears: w4g128 (sym), w4g32, w4g128-asym, w8 (per channel), "
          "w8g128, w3g128, w2g64, ... (w<bits>[g<group>][-asym]); W8A8 as llm-compressor's presets "
          "(compressed-tensors): w8a8 (int8, dynamic per-token activations), fp8 (per-channel, "
          "dynamic per-token fp8 activations), fp8-block (128x128, 1x128 activation groups)")
      .add("format",
           "checkpoint format with --quantize: auto_round, auto_gptq, auto_awq or "
           "compressed-tensors",
           false, "auto_round");
  if (Status s = flags.parse(args); !s.ok()) {
    std::fprintf(stderr, "make-model: %s\n\n%s", s.message().c_str(),
                 flags.usage("make-model").c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.usage("make-model").c_str());
    return 0;
  }
  if (Status s = make_model(flags); !s.ok()) {
    std::fprintf(stderr, "make-model: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace qs::apps
