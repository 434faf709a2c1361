// diffusion: pipeline memory sizing (see pipeline_memory.h).
#include "diffusion/pipeline_memory.h"

#include <cstdio>
#include <filesystem>

#include "core/units_text.h"
#include "diffusion/flux_transformer.h"
#include "io/checkpoint.h"
#include "models/component.h"
#include "ops/quant_matrix.h"

namespace qs::diffusion {

namespace {

namespace fs = std::filesystem;

bool has_weights(const std::string& dir) {
  const std::string base = io::Checkpoint::base_name(dir);
  return fs::exists(fs::path(dir) / (base + ".safetensors")) ||
         fs::exists(fs::path(dir) / (base + ".safetensors.index.json"));
}

// The transformer from its config: linears as stored (or as quantized by its config), biases
// and norm weights widened to f32 as load does. Dense weights take the dtype of the weight
// files when they are there, bf16 otherwise.
Result<ComponentMemory> transformer_memory(const std::string& dir, FluxConfig* config) {
  QS_ASSIGN_OR_RETURN(models::Component c, models::Component::open_config(dir));
  QS_ASSIGN_OR_RETURN(*config, read_flux_config(c));
  std::shared_ptr<io::Checkpoint> ckpt;
  if (has_weights(dir)) {
    QS_ASSIGN_OR_RETURN(io::Checkpoint opened,
                        io::Checkpoint::open(dir, io::Checkpoint::base_name(dir)));
    ckpt = std::make_shared<io::Checkpoint>(std::move(opened));
  }
  const io::QuantConfig& quant = c.quantization();
  ComponentMemory m;
  m.name = "transformer";
  m.source = ckpt ? "config.json + weight headers" : "config.json";
  m.scheme = quant.quantized() ? quant.summary() : "16-bit";
  for (const FluxTensorSpec& t : flux_tensor_specs(*config)) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    m.params += numel;
    m.as_bf16 += static_cast<size_t>(numel) * 2;
    if (t.shape.size() != 2) {
      m.resident += static_cast<size_t>(numel) * 4;  // biases and norm weights: f32 copies
      continue;
    }
    ++m.linears;
    const std::string module = t.name.substr(0, t.name.size() - std::string(".weight").size());
    const formats::QuantScheme scheme = quant.scheme_for(module);
    if (scheme.quantized()) {
      ++m.quantized_linears;
      m.resident += ops::QuantMatrix::resident_bytes_for(scheme, t.shape[0], t.shape[1]);
    } else if (ckpt && ckpt->has(t.name)) {
      m.resident += ckpt->get(t.name).value().nbytes();  // a view of the file
    } else {
      m.resident += static_cast<size_t>(numel) * 2;
    }
  }
  return m;
}

// Another component from its weight files: matmul weights stay views of the file; the
// embedding tables, convolution kernels, norms and biases are widened to f32 at load.
Result<ComponentMemory> stored_memory(const std::string& name, const std::string& dir) {
  ComponentMemory m;
  m.name = name;
  if (!has_weights(dir)) {
    m.source = "absent";
    return m;
  }
  QS_ASSIGN_OR_RETURN(io::Checkpoint ckpt,
                      io::Checkpoint::open(dir, io::Checkpoint::base_name(dir)));
  m.source = "weight headers";
  DType first = DType::kF32;
  bool mixed = false, seen = false;
  for (const std::string& n : ckpt.names()) {
    const Tensor t = ckpt.get(n).value();
    m.params += t.numel();
    m.as_bf16 += static_cast<size_t>(t.numel()) * 2;
    const bool view = t.shape.size() == 2 && n.find("embed") == std::string::npos &&
                      n.find("relative_attention_bias") == std::string::npos &&
                      n.find("shared") == std::string::npos;
    if (view) ++m.linears;
    m.resident += view ? t.nbytes() : static_cast<size_t>(t.numel()) * 4;
    if (seen && t.dtype != first) mixed = true;
    if (!seen) first = t.dtype, seen = true;
  }
  m.scheme = mixed ? "mixed dtypes" : dtype_name(first);
  return m;
}

}  // namespace

size_t PipelineMemory::weights() const {
  size_t total = 0;
  for (const ComponentMemory& c : components) total += c.resident;
  return total;
}

size_t PipelineMemory::peak(bool true_cfg) const {
  return weights() + (true_cfg ? activations_batch2 : activations_batch1);
}

Result<PipelineMemory> pipeline_memory(const std::string& dir, int64_t width, int64_t height,
                                       int64_t max_sequence_length, int threads) {
  if (width <= 0 || height <= 0 || width % 16 != 0 || height % 16 != 0) {
    return invalid_argument("--width and --height must be positive multiples of 16");
  }
  if (max_sequence_length <= 0) return invalid_argument("--max-sequence-length must be positive");
  PipelineMemory pm;
  pm.width = width;
  pm.height = height;
  pm.n_img = (width / 16) * (height / 16);
  pm.n_txt = max_sequence_length;
  const bool pipeline = fs::exists(fs::path(dir) / "model_index.json");
  const std::string tdir = pipeline ? (fs::path(dir) / "transformer").string() : dir;
  FluxConfig config;
  QS_ASSIGN_OR_RETURN(ComponentMemory t, transformer_memory(tdir, &config));
  pm.components.push_back(t);
  if (pipeline) {
    for (const char* name : {"text_encoder", "text_encoder_2", "vae"}) {
      const fs::path sub = fs::path(dir) / name;
      if (!fs::is_directory(sub)) continue;
      QS_ASSIGN_OR_RETURN(ComponentMemory c, stored_memory(name, sub.string()));
      pm.components.push_back(c);
    }
  }
  pm.activations_batch1 = flux_activation_bytes(config, 1, pm.n_img, pm.n_txt, threads);
  pm.activations_batch2 = flux_activation_bytes(config, 2, pm.n_img, pm.n_txt, threads);
  return pm;
}

std::string pipeline_memory_text(const PipelineMemory& m) {
  std::string out =
      "| component | sized from | weights | parameters | linears (quantized) | resident | as bf16 "
      "|\n|---|---|---|---:|---:|---:|---:|\n";
  char buf[512];
  for (const ComponentMemory& c : m.components) {
    std::snprintf(buf, sizeof(buf), "| %s | %s | %s | %s | %lld (%lld) | %s | %s |\n",
                  c.name.c_str(), c.source.c_str(), c.scheme.empty() ? "-" : c.scheme.c_str(),
                  params_text(c.params).c_str(), static_cast<long long>(c.linears),
                  static_cast<long long>(c.quantized_linears), bytes_text(c.resident).c_str(),
                  bytes_text(c.as_bf16).c_str());
    out += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "resident weights: %s (absent components not counted)\n"
                "transformer activations at %lldx%lld (%lld image + %lld text tokens): %s a "
                "forward, %s for true CFG's batch of 2\n"
                "peak (weights + one step): %s; with true CFG %s (the VAE decode's own working "
                "set is not included)\n",
                bytes_text(m.weights()).c_str(), static_cast<long long>(m.width),
                static_cast<long long>(m.height), static_cast<long long>(m.n_img),
                static_cast<long long>(m.n_txt), bytes_text(m.activations_batch1).c_str(),
                bytes_text(m.activations_batch2).c_str(), bytes_text(m.peak(false)).c_str(),
                bytes_text(m.peak(true)).c_str());
  return out + buf;
}

nlohmann::json pipeline_memory_json(const PipelineMemory& m) {
  nlohmann::json comps = nlohmann::json::array();
  for (const ComponentMemory& c : m.components) {
    comps.push_back({{"name", c.name},
                     {"sized_from", c.source},
                     {"weights", c.scheme},
                     {"parameters", c.params},
                     {"linears", c.linears},
                     {"quantized_linears", c.quantized_linears},
                     {"resident_bytes", c.resident},
                     {"bf16_bytes", c.as_bf16}});
  }
  return {{"components", comps},
          {"width", m.width},
          {"height", m.height},
          {"image_tokens", m.n_img},
          {"text_tokens", m.n_txt},
          {"resident_weight_bytes", m.weights()},
          {"activation_bytes", m.activations_batch1},
          {"activation_bytes_true_cfg", m.activations_batch2},
          {"peak_bytes", m.peak(false)},
          {"peak_bytes_true_cfg", m.peak(true)}};
}

}  // namespace qs::diffusion
