// apps: `quantserve make-model`: writes a random-weight Hugging Face checkpoint at the real
// shapes of a known model (or of a given config.json), for benchmarks and kernel tests that
// need realistic sizes but no trained weights. The tensor list comes from the model family's
// own declaration, so what this writes is exactly what the loader expects.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "apps/commands.h"
#include "apps/flags.h"
#include "io/checkpoint.h"
#include "models/model_config.h"
#include "models/model_presets.h"

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

// Norm weights start at one (as HF initialises them); everything else is uniform with the
// standard deviation HF uses for initializer_range (0.02), so activations stay finite.
Tensor random_tensor(const models::TensorSpec& spec, DType dtype, uint64_t seed) {
  Tensor t = Tensor::zeros(dtype, spec.shape);
  const bool is_norm = spec.name.find("norm.weight") != std::string::npos;
  SplitMix rng{seed ^ hash_name(spec.name)};
  const float amplitude = 0.02f * std::sqrt(3.0f);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = is_norm ? 1.0f : amplitude * rng.uniform();
    switch (dtype) {
      case DType::kBF16:
        t.ptr<uint16_t>()[i] = f32_to_bf16(v);
        break;
      case DType::kF16:
        t.ptr<uint16_t>()[i] = f32_to_f16(v);
        break;
      default:
        t.ptr<float>()[i] = v;
        break;
    }
  }
  return t;
}

Status make_model(const Flags& flags) {
  nlohmann::json config;
  if (flags.has("like") == flags.has("config")) {
    return invalid_argument("give exactly one of --like NAME or --config FILE");
  }
  if (flags.has("like")) {
    QS_ASSIGN_OR_RETURN(config, models::model_preset(flags.get("like")));
  } else {
    QS_ASSIGN_OR_RETURN(config, io::read_json(flags.get("config")));
  }
  if (!flags.has("out")) return invalid_argument("--out DIR is required");
  if (flags.has("layers")) {
    QS_ASSIGN_OR_RETURN(int64_t layers, flags.get_int("layers"));
    if (layers < 1) return invalid_argument("--layers must be at least 1");
    config["num_hidden_layers"] = layers;
  }
  std::string dtype_flag = flags.get("dtype");
  if (dtype_flag.empty()) dtype_flag = config.value("torch_dtype", std::string("bfloat16"));
  QS_ASSIGN_OR_RETURN(DType dtype, parse_weight_dtype(dtype_flag));
  config["torch_dtype"] = torch_dtype_name(dtype);
  QS_ASSIGN_OR_RETURN(uint64_t seed_signed, flags.get_int("seed"));
  const uint64_t seed = seed_signed;

  QS_ASSIGN_OR_RETURN(models::ModelConfig parsed, models::parse_model_config(config));
  const std::string out = flags.get("out");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return io_error("cannot create " + out + ": " + ec.message());

  std::vector<std::pair<std::string, Tensor>> tensors;
  uint64_t bytes = 0;
  for (const auto& spec : models::expected_tensors(parsed)) {
    tensors.emplace_back(spec.name, random_tensor(spec, dtype, seed));
    bytes += tensors.back().second.nbytes();
  }
  QS_RETURN_IF_ERROR(io::write_json(out + "/config.json", config));
  nlohmann::json gen = {{"_from_model_config", true}};
  if (config.contains("bos_token_id")) gen["bos_token_id"] = config["bos_token_id"];
  if (config.contains("eos_token_id")) gen["eos_token_id"] = config["eos_token_id"];
  QS_RETURN_IF_ERROR(io::write_json(out + "/generation_config.json", gen));
  QS_RETURN_IF_ERROR(
      io::write_safetensors(out + "/model.safetensors", tensors, {{"format", "pt"}}));
  std::fprintf(stderr, "make-model: wrote %s (%s, %zu tensors, %.1f MiB, random weights)\n",
               out.c_str(), parsed.architecture.c_str(), tensors.size(), bytes / 1048576.0);
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
      .add("seed", "random seed", false, "0");
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
